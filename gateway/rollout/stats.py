"""Verdicts, and exact fixed-sample bounds on a binomial rate.

The rollout's decisions are sequential tests (gateway/rollout/sequential/); what is left here serves
one look at a finished sample: the Verdict enum every check carries, and one-sided exact
(Clopper-Pearson) bounds, which keep their confidence even for a handful of requests (a load test's
summary of the split it saw, loadtests/split.py). The window rule that used them for rollbacks is
retired to bench/retired_rules.py, where the decision benchmark compares it with the shipped tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from scipy.stats import beta


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"


@dataclass(frozen=True)
class RateBounds:
    lower: float
    upper: float


def exact_bounds(events: int, trials: int, confidence: float = 0.95) -> RateBounds:
    """One-sided Clopper-Pearson bounds on a binomial rate; each holds with `confidence`."""
    if trials <= 0:
        return RateBounds(0.0, 1.0)
    if not 0 <= events <= trials:
        raise ValueError(f"{events} events in {trials} trials")
    alpha = 1 - confidence
    lower = 0.0 if events == 0 else float(beta.ppf(alpha, events, trials - events + 1))
    upper = 1.0 if events == trials else float(beta.ppf(confidence, events + 1, trials - events))
    return RateBounds(lower, upper)
