"""Error-rate decisions that hold up at low traffic.

Flagger and Argo Rollouts compare a raw ratio with the threshold: at a 5 % stage with a 0.3 %
threshold, one error in a few hundred requests trips them (../shared/research/progressive_delivery.md
§5.3). Here a rate fails only when it is above the threshold with 95 % confidence, passes only when
it is below it with 95 % confidence (and enough requests were seen), and is inconclusive otherwise.
Bounds are one-sided exact (Clopper-Pearson) binomial bounds: they keep their 95 % even for a
handful of requests, where Wilson and normal approximations claim more than the data shows (one
error in 60 requests is not evidence of a rate above 0.3 %: it happens 16 % of the time at 0.3 %).
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


@dataclass(frozen=True)
class RateDecision:
    verdict: Verdict
    rate: float | None
    samples: int
    bounds: RateBounds
    threshold: float
    reason: str


def decide_error_rate(errors: int, requests: int, threshold: float, min_requests: int) -> RateDecision:
    """fail: above `threshold` with 95 % confidence (at any sample size: a clearly broken variant
    fails fast); pass: below it with 95 % confidence and at least `min_requests` seen; else inconclusive."""
    bounds = exact_bounds(errors, requests)
    rate = errors / requests if requests else None
    if requests and bounds.lower > threshold:
        verdict, why = Verdict.FAIL, f"error rate above {threshold:.2%} with 95% confidence"
    elif requests >= min_requests and bounds.upper < threshold:
        verdict, why = Verdict.PASS, f"error rate below {threshold:.2%} with 95% confidence"
    elif requests < min_requests:
        verdict, why = Verdict.INCONCLUSIVE, f"{requests} requests, fewer than the {min_requests} needed"
    else:
        verdict, why = Verdict.INCONCLUSIVE, f"cannot tell the error rate from {threshold:.2%} yet"
    return RateDecision(verdict, rate, requests, bounds, threshold, why)


def naive_error_rate(errors: int, requests: int, threshold: float) -> Verdict:
    """What Flagger and Argo Rollouts do with their defaults: the raw ratio against the threshold."""
    if requests == 0:
        return Verdict.FAIL  # Flagger: no data counts as a failed check
    return Verdict.FAIL if errors / requests > threshold else Verdict.PASS
