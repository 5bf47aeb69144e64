"""The check values and verdicts every check returns (gateway/rollout/checks/), and how a decision's
sentences quote them. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    value: float | None
    samples: int
    bound: float | None
    threshold: float
    reason: str
    log_evalue: float | None = None  # a sequential test's evidence (log e-value or detector statistic)
    log_bound: float | None = None  # ... and the bound it fires at
    shared: bool = False  # the baseline's own traffic fires the same test: a shared incident


def describe(check: Check) -> str:
    """A check as evidence: verdict, value, samples, bound and threshold, its log e-value against its
    bound (a sequential test), and whether the baseline shares the failure."""
    evidence = ""
    if check.log_evalue is not None and check.log_bound is not None:
        evidence = f", log e-value {check.log_evalue:.2f} vs {check.log_bound:.2f}"
    shared = ", shared incident (the baseline fails the same test)" if check.shared else ""
    return (
        f"{check.name} {check.verdict.value}: value {_num(check.value)} over {check.samples} samples, "
        f"bound {_num(check.bound)}, threshold {_num(check.threshold)}{evidence}{shared} ({check.reason})"
    )


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def summary(checks: Sequence[Check]) -> str:
    """The checks in one line, value over samples each (what a step's reason quotes)."""
    return ", ".join(f"{c.name}={_num(c.value)}/{c.samples}" for c in checks)
