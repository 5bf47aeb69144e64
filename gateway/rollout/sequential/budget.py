"""Confidence sequence and sample-size arithmetic for the error-rate tests (research §4.4, §4.5, §8.3, §9)."""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.special import betaln, log_expit, logit, xlogy

from gateway.rollout.sequential._state import look_counts, require

_LOGIT_SPAN = 700.0  # brentq brackets in logit(p): exp(-700) is as close to 0 or 1 as a float gets


def beta_binomial_log_lr(events: int, requests: int, p: float, p0: float) -> float:
    """log of the Beta(1, 1/p0 - 1) mixture of Bernoulli likelihoods over the likelihood at p.

    A test martingale under "the error rate is p" (Robbins' method of mixtures), the statistic that
    error_rate_bounds inverts; the prior is tightest near p0. Exposed for checks against other code.
    """
    n, s = look_counts(requests, events)
    return _log_mixture(s, n, p0) - float(xlogy(s, p) + xlogy(n - s, 1 - p))


def _log_mixture(s: int, n: int, p0: float) -> float:
    a, b = 1.0, 1.0 / p0 - 1.0
    return float(betaln(a + s, b + n - s) - betaln(a, b))


def error_rate_bounds(events: int, requests: int, alpha: float, p0: float) -> tuple[float, float]:
    """The error rates not yet rejected at level alpha, valid at every look at once (research §4.5).

    {p : beta_binomial_log_lr(S, n, p, p0) < log(1/alpha)}, i.e. log B(a+S, b+n-S) - log B(a, b)
    - S log p - (n-S) log(1-p) < log(1/alpha) with a = 1, b = 1/p0 - 1 (Robbins; Howard et al.). The set
    is an interval around S/n (the mixture never beats the maximum likelihood); its ends are found by
    brentq in logit space. The caller keeps the running intersection (max of lowers, min of uppers).
    """
    n, s = look_counts(requests, events)
    require(0.0 < alpha < 1.0, "alpha", f"must be in (0, 1), got {alpha}")
    require(0.0 < p0 < 1.0, "p0", f"must be in (0, 1), got {p0}")
    if n == 0:
        return 0.0, 1.0
    log_mixture = _log_mixture(s, n, p0)
    threshold = math.log(1.0 / alpha)

    def excess(z: float) -> float:  # beta_binomial_log_lr at p = expit(z), minus the threshold
        return log_mixture - s * log_expit(z) - (n - s) * log_expit(-z) - threshold

    centre = min(max(logit(s / n), -_LOGIT_SPAN), _LOGIT_SPAN)
    lower = 0.0 if s == 0 else _expit(brentq(excess, -_LOGIT_SPAN, centre))
    upper = 1.0 if s == n else _expit(brentq(excess, centre, _LOGIT_SPAN))
    return lower, upper


def _expit(z: float) -> float:
    return math.exp(log_expit(z))


def kl_bernoulli(p: float, q: float) -> float:
    """KL(Bernoulli(p) || Bernoulli(q)) in nats: the evidence one request carries for p against q."""
    require(0.0 <= p <= 1.0, "p", f"must be in [0, 1], got {p}")
    require(0.0 < q < 1.0, "q", f"must be in (0, 1), got {q}")
    return float(xlogy(p, p / q) + xlogy(1 - p, (1 - p) / (1 - q)))


def requests_to_detect(p0: float, p1: float, alpha: float) -> float:
    """log(1/alpha) / KL(p1 || p0): no level-alpha test of p <= p0 rejects in fewer requests on average
    when the true rate is p1 (Wald; research §8.3). Our mixtures take about 1.1-1.4 times this."""
    require(p1 > p0, "p1", f"must exceed p0 ({p0}), got {p1}")
    return alpha_log_threshold(alpha) / kl_bernoulli(p1, p0)


def requests_needed(p0: float, p_catch: float, alpha: float, factor: float = 2.5) -> int:
    """A stage's minimum candidate requests before promotion: factor x the floor for the smallest
    regression p_catch worth catching; 2.5 gives about 90 % power for E1 (research §9)."""
    require(factor > 0, "factor", f"must be positive, got {factor}")
    return math.ceil(factor * requests_to_detect(p0, p_catch, alpha))


def detector_log_threshold(mean_seconds_between_false_alarms: float, look_seconds: float) -> float:
    """log A for the E2 detector, A the average run length in looks: false alarms then come no more
    often than once per mean_seconds_between_false_alarms on average, and within H looks with
    probability <= H/A (research §4.4)."""
    require(look_seconds > 0, "look_seconds", f"must be positive, got {look_seconds}")
    looks = mean_seconds_between_false_alarms / look_seconds
    require(looks > 1, "mean_seconds_between_false_alarms", "must exceed one look")
    return math.log(looks)


def alpha_log_threshold(alpha: float) -> float:
    """log(1/alpha): Ville's inequality makes crossing it a level-alpha decision at any number of looks."""
    require(0.0 < alpha < 1.0, "alpha", f"must be in (0, 1), got {alpha}")
    return math.log(1.0 / alpha)
