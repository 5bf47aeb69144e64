"""The check values and verdicts the analysis (gateway/rollout/analysis.py) and the answer-quality checks
(gateway/rollout/quality_checks.py) return. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar


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


T = TypeVar("T")


def given(value: T | None, what: str) -> T:
    """What a running test implies: evidence.start makes a test only with the plan's bound for it (the
    SLO test with its baseline twin), and the SLO test counts first tokens only once it has its edge."""
    if value is None:
        raise ValueError(f"the evidence runs a test without {what}")
    return value
