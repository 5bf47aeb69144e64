"""The error-rate decision against the naive ratio: fewer false rollbacks at low traffic."""

import numpy as np
import pytest

from bench import decision_rules
from gateway.rollout.stats import Verdict, decide_error_rate, exact_bounds, naive_error_rate

THRESHOLD = 0.003


def test_bounds_match_the_textbook_sample_sizes():
    """Proving a rate below 0.3 % with 0 errors takes about 1,000 requests (research report §5.3: 999)."""
    assert exact_bounds(0, 999).upper < THRESHOLD < exact_bounds(0, 997).upper
    assert exact_bounds(1, 1582).upper < THRESHOLD < exact_bounds(1, 1579).upper
    assert exact_bounds(3, 2585).upper < THRESHOLD < exact_bounds(3, 2580).upper


@pytest.mark.parametrize(
    ("errors", "requests", "verdict"),
    [
        (0, 50, Verdict.INCONCLUSIVE),  # too few to pass
        (1, 120, Verdict.INCONCLUSIVE),  # one error: a naive check would roll back
        (0, 1200, Verdict.PASS),
        (1, 60, Verdict.INCONCLUSIVE),  # happens 16 % of the time at a true 0.3 %
        (5, 100, Verdict.FAIL),  # clearly broken: fails below min_requests
        (30, 1000, Verdict.FAIL),
        (4, 1000, Verdict.INCONCLUSIVE),  # 0.4 %: not yet distinguishable from 0.3 %
    ],
)
def test_verdicts(errors, requests, verdict):
    decision = decide_error_rate(errors, requests, THRESHOLD, min_requests=100)
    assert decision.verdict == verdict, decision.reason
    assert decision.samples == requests


def simulate(rate: float, window: int, trials: int, seed: int) -> tuple[float, float]:
    """Share of windows each rule calls a failure, at a true error rate `rate`."""
    errors = np.random.default_rng(seed).binomial(window, rate, size=trials)
    ours = np.mean(
        [decide_error_rate(int(e), window, THRESHOLD, 100).verdict == Verdict.FAIL for e in errors]
    )
    naive = np.mean([naive_error_rate(int(e), window, THRESHOLD) == Verdict.FAIL for e in errors])
    return float(ours), float(naive)


@pytest.mark.parametrize("window", [60, 120, 300, 600])
def test_fewer_false_rollbacks_than_the_naive_ratio_at_low_traffic(window):
    """A healthy variant (true rate 0.1 %, a third of the threshold) in windows of a 5 % stage."""
    ours, naive = simulate(rate=0.001, window=window, trials=4000, seed=window)
    assert ours <= 0.01  # at most about 1 % of healthy windows trip the rule
    assert naive >= 0.05  # the raw ratio trips on 6-26 % of them
    assert ours < naive / 5


def test_the_recent_part_fails_a_sharp_regression_that_the_window_still_dilutes():
    """A minute of healthy traffic, then 4 failures in the last 160 requests: the window's rate (6 in
    960) cannot be told from 0.3 % yet, the recent part's can."""
    assert decide_error_rate(6, 960, THRESHOLD, 100).verdict == Verdict.INCONCLUSIVE
    decision = decide_error_rate(6, 960, THRESHOLD, 100, recent=(4, 160))
    assert decision.verdict == Verdict.FAIL
    assert "most recent 160 requests (4 failed)" in decision.reason
    assert decision.bounds.lower > THRESHOLD
    assert decide_error_rate(6, 960, THRESHOLD, 100, recent=(1, 160)).verdict == Verdict.INCONCLUSIVE


def test_over_an_hour_of_looks_a_healthy_variant_is_rolled_back_far_less_often():
    """720 looks an hour (bench/decision_rules.py, the controller's defaults): the naive ratio rolls a
    variant at a third of the threshold back within almost every hour; the shipped rule rarely."""
    rng = np.random.default_rng(3)
    hours = decision_rules.false_rollbacks(rng, rate=4, healthy=0.001, trials=200)
    assert hours["naive"] >= 0.9
    assert hours["graystack"] <= 0.1


@pytest.mark.parametrize("regression", [0.02, 0.05, 0.2])
def test_no_slower_than_the_naive_ratio_on_a_real_regression_at_a_busy_stage(regression):
    """At 64 requests/s to the variant (a 20 % stage of 320), the window's recent part keeps the
    minutes before the fault from diluting it: the median time from the fault to the first failing
    look is no longer than the naive ratio's, which meanwhile rolls healthy variants back."""
    found = decision_rules.detection(np.random.default_rng(5), rate=64, regression=regression, trials=200)
    ours, naive = found["graystack"], found["naive"]
    assert ours["median_s"] <= naive["median_s"]
    assert ours["detected_within_300s"] == 1.0
    assert ours["false_before_onset"] < naive["false_before_onset"]
