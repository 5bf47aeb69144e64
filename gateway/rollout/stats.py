"""Error-rate decisions that hold up at low traffic.

Flagger and Argo Rollouts compare a raw ratio with the threshold: at a 5 % stage with a 0.3 %
threshold, one error in a few hundred requests trips them (../shared/research/progressive_delivery.md
§5.3). Here a rate fails only when it is above the threshold with 95 % confidence, passes only when
it is below it with 95 % confidence (and enough requests were seen), and is inconclusive otherwise.
Bounds are one-sided exact (Clopper-Pearson) binomial bounds: they keep their confidence even for
a handful of requests, where Wilson and normal approximations claim more than the data shows (one
error in 60 requests is not evidence of a rate above 0.3 %: it happens 16 % of the time at 0.3 %).

The controller looks every interval (720 looks an hour at 5 s), so a rule that is wrong 5 % of the
time per look rolls a healthy variant back within the hour more often than not; bench/decision_rules.py
measured it (most hours at two thirds of the threshold, at low traffic). Failing therefore takes
99 % confidence over the window, or 99.5 % over its most recent part (`recent`, 15 s by default):
the recent part is not diluted by the minutes before a fault, which is what lets a sharp regression
fail as fast as the naive ratio does once traffic is high enough for it not to trip on one error
(measured in the same benchmark, quoted in BENCHMARKS.md). A pass still needs 95 % over the window:
it only ever lets a stage end whose hold has elapsed.
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


PASS_CONFIDENCE = 0.95
FAIL_CONFIDENCE = 0.99
RECENT_FAIL_CONFIDENCE = 0.995


def decide_error_rate(
    errors: int,
    requests: int,
    threshold: float,
    min_requests: int,
    recent: tuple[int, int] | None = None,
) -> RateDecision:
    """fail: above `threshold` with 99 % confidence over the window, or 99.5 % over `recent` (its
    errors, requests), at any sample size: a clearly broken variant fails fast; pass: below it with
    95 % confidence and at least `min_requests` seen; else inconclusive. The decision's bounds are
    the window's (the recent part's lower bound where that part failed it)."""
    rate = errors / requests if requests else None
    failing = exact_bounds(errors, requests, FAIL_CONFIDENCE)
    if requests and failing.lower > threshold:
        why = f"error rate above {threshold:.2%} with 99% confidence"
        return RateDecision(Verdict.FAIL, rate, requests, failing, threshold, why)
    if recent is not None and recent[1]:
        recent_errors, recent_requests = recent
        lower = exact_bounds(recent_errors, recent_requests, RECENT_FAIL_CONFIDENCE).lower
        if lower > threshold:
            why = (
                f"error rate above {threshold:.2%} with 99.5% confidence over the most recent "
                f"{recent_requests} requests ({recent_errors} failed)"
            )
            return RateDecision(Verdict.FAIL, rate, requests, RateBounds(lower, 1.0), threshold, why)
    bounds = exact_bounds(errors, requests, PASS_CONFIDENCE)
    if requests >= min_requests and bounds.upper < threshold:
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
