"""The experiment's confidence sequences (gateway/rollout/sequential/quantiles.py and the error-rate
difference of gateway/rollout/checks/experiment.py): coverage at every look, by simulation, with a known
true difference; and their shape on small inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from gateway.rollout.checks.experiment import ExperimentSettings, ExperimentTests, report
from gateway.rollout.sequential.quantiles import (
    EDGES,
    add_values,
    bin_of,
    bounds_batch,
    quantile_bounds,
    ratio_bounds,
)

RUNS = 1000
ALPHA = 0.05


def _missed_at_any_look(p: float, scale: float, looks: int, per_look: int, seed: int) -> float:
    """The share of RUNS whose interval on the p-quantile of a lognormal (median `scale`, sigma 0.6) missed
    the truth at one look or more, reading it after every `per_look` draws."""
    rng = np.random.default_rng(seed)
    truth = scale * math.exp(0.6 * norm.ppf(p))
    dense = np.zeros((RUNS, len(EDGES) + 1))
    missed = np.zeros(RUNS, dtype=bool)
    rows = np.repeat(np.arange(RUNS), per_look)
    for _ in range(looks):
        bins = bin_of(rng.lognormal(math.log(scale), 0.6, RUNS * per_look))
        np.add.at(dense, (rows, bins), 1)
        cum = np.cumsum(dense[:, :-1], axis=1)
        lower, upper = bounds_batch(cum, dense.sum(axis=1), p, ALPHA)
        missed |= (truth <= lower) | (truth > upper)
    return float(missed.mean())


@pytest.mark.parametrize(("p", "per_look"), [(0.5, 5), (0.9, 20)])
def test_a_quantile_interval_covers_the_truth_at_every_look_in_at_least_1_minus_alpha_of_runs(
    p: float, per_look: int
) -> None:
    missed = _missed_at_any_look(p, 0.4, looks=40, per_look=per_look, seed=int(p * 100))
    # 1,000 runs: a binomial's sd at alpha is 0.7 %, so 3 sd of slack above alpha
    assert missed <= ALPHA + 0.021, missed


def test_the_quantile_interval_narrows_around_the_truth_with_data() -> None:
    rng = np.random.default_rng(1)
    values = rng.lognormal(math.log(0.4), 0.6, 20_000)
    lower, upper = quantile_bounds(add_values({}, values), 0.5, ALPHA)
    assert lower < 0.4 <= upper
    assert upper / lower < 1.1  # a 20,000-answer median is known to within a few grid steps
    assert quantile_bounds({}, 0.5, ALPHA) == (0.0, math.inf)  # no data: nothing is excluded


def test_the_ratio_of_two_intervals_covers_the_ratio_of_their_quantiles() -> None:
    assert [float(end) for end in ratio_bounds((1.0, 2.0), (4.0, 8.0))] == [0.125, 0.5]
    assert [float(end) for end in ratio_bounds((1.0, math.inf), (0.0, 2.0))] == [0.5, math.inf]
    assert [float(end) for end in ratio_bounds((0.0, 2.0), (1.0, math.inf))] == [0.0, 2.0]


def test_the_error_rate_difference_covers_the_truth_at_every_look_in_at_least_1_minus_alpha_of_runs() -> None:
    """Through the report itself (one run at a time: the error intervals are a root search each)."""
    rng = np.random.default_rng(7)
    settings = ExperimentSettings(alpha=ALPHA, prior_error_rate=0.003, errors_randomised=True)
    truth = 0.02 - 0.01
    missed = 0
    for _ in range(300):
        tests, miss = ExperimentTests(), False
        for _ in range(10):
            n = (200, 200)
            x = (int(rng.binomial(200, 0.02)), int(rng.binomial(200, 0.01)))
            tests = ExperimentTests(
                requests=(tests.requests[0] + n[0], tests.requests[1] + n[1]),
                errors=(tests.errors[0] + x[0], tests.errors[1] + x[1]),
            )
            (difference,) = report(tests, settings).differences
            miss |= not difference.lower <= truth <= difference.upper
        missed += miss
    # the report spends alpha / PARTS per variant interval, so misses are far rarer than alpha
    assert missed / 300 <= ALPHA


def test_a_report_decides_a_large_difference_and_leaves_out_what_it_cannot_compare() -> None:
    rng = np.random.default_rng(3)
    slow, fast = rng.lognormal(math.log(0.6), 0.3, 4000), rng.lognormal(math.log(0.4), 0.3, 4000)
    tests = ExperimentTests(
        requests=(4000, 4000), errors=(400, 4), ttft=(add_values({}, slow), add_values({}, fast))
    )
    found = report(tests, ExperimentSettings(alpha=ALPHA, prior_error_rate=0.003, errors_randomised=True))
    by_name = {d.name: d for d in found.differences}
    assert set(by_name) == {"error_rate", "ttft_p50", "ttft_p90"}
    assert by_name["ttft_p50"].decided
    assert by_name["ttft_p50"].lower > 1.3
    assert by_name["error_rate"].decided
    assert by_name["error_rate"].lower > 0.05
    assert found.not_compared == ("tpot (no answers measured on both variants yet)",)
    assert not found.decided  # a part not compared is not decided
