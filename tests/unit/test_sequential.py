"""The anytime-valid rollback statistics: closed forms, the research's numbers, and simulated validity/power.

Simulations are vectorised over runs with the module's own batched kernels and use fixed seeds; false-alarm
fractions are compared with alpha plus three binomial standard errors.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.special import betaln, logsumexp, xlogy
from scipy.stats import binom, norm

from gateway.rollout.sequential import (
    RatioTest,
    ShiftTest,
    ThresholdTest,
    alpha_log_threshold,
    beta_binomial_log_lr,
    detector_log_threshold,
    edge_pairs,
    error_rate_bounds,
    kl_bernoulli,
    ratio_look,
    requests_needed,
    requests_to_detect,
    shift_look,
    threshold_look,
)
from inference.server.metrics import TTFT_BUCKETS

VLLM_TTFT_EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def slack(alpha: float, runs: int) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def theta(psi: float, share: float) -> float:
    return psi * share / (psi * share + 1 - share)


# --- closed forms ---------------------------------------------------------------------------------


def test_a_one_point_grid_is_the_sprt_likelihood_ratio():
    p0, p1 = 0.003, 0.02
    test = ThresholdTest(p0, (p1,), (0.0,), (0.0,), 0, 0, 0)
    for n, x in [(80, 0), (75, 2), (0, 0), (90, 1)]:
        test = test.update(n, x)
    n, x = 245, 3
    by_hand = x * math.log(p1 / p0) + (n - x) * math.log((1 - p1) / (1 - p0))
    assert test.log_evalue == pytest.approx(by_hand, rel=1e-12)
    assert test.log_evalue == pytest.approx(binom.logpmf(x, n, p1) - binom.logpmf(x, n, p0), rel=1e-9)
    assert (test.requests, test.events, test.steps) == (n, x, 3)


def test_e1_is_the_average_of_the_sprt_products_over_the_grid():
    test = ThresholdTest.new(0.003)
    looks = [(80, 1), (64, 0), (70, 3)]
    for n, x in looks:
        test = test.update(n, x)
    products = [
        math.prod(binom.pmf(x, n, p) / binom.pmf(x, n, 0.003) for n, x in looks) for p in test.alternatives
    ]
    assert len(test.alternatives) == 10
    assert test.alternatives[0] == pytest.approx(0.0045)
    assert test.alternatives[-1] == pytest.approx(0.5)
    assert math.exp(test.log_evalue) == pytest.approx(np.mean(products), rel=1e-9)


def test_e2_follows_the_shiryaev_roberts_recursion_and_skips_empty_looks():
    test = ThresholdTest.new(0.01)
    assert test.log_detector == -math.inf
    looks = [(20, 0), (0, 0), (30, 2), (25, 0), (0, 0), (40, 5)]
    p0, grid = 0.01, np.array(test.alternatives)
    sr = np.zeros_like(grid)
    for n, x in looks:
        test = test.update(n, x)
        if n:
            sr = (sr + 1) * (grid / p0) ** x * ((1 - grid) / (1 - p0)) ** (n - x)
    assert test.steps == 4
    assert test.log_detector == pytest.approx(math.log(sr.mean()), rel=1e-10)


def test_larger_grids_for_thresholds_above_a_third_stay_inside_the_open_interval():
    for p0 in (1 / 3, 0.5, 0.9):
        grid = ThresholdTest.new(p0).alternatives
        assert p0 < min(grid)
        assert max(grid) < 1
        assert list(grid) == sorted(grid)


def test_r1_is_the_product_of_binomial_pmf_ratios_over_strata_and_looks():
    psi0 = 2.0
    test = RatioTest.new(psi0)
    looks = [
        [(50, 2, 950, 3), (10, 1, 190, 0), (0, 0, 40, 1)],  # the last stratum has no candidate: skipped
        [(200, 4, 800, 2), (30, 0, 0, 0)],  # ... and this one no baseline
    ]
    for strata in looks:
        test = test.update(strata)
    compared = [s for strata in looks for s in strata if s[0] and s[2]]

    def factor(psi: float) -> float:
        return math.prod(
            binom.pmf(xc, xc + xb, theta(psi, nc / (nc + nb)))
            / binom.pmf(xc, xc + xb, theta(psi0, nc / (nc + nb)))
            for nc, xc, nb, xb in compared
        )

    assert math.exp(test.log_evalue) == pytest.approx(
        np.mean([factor(p) for p in test.alternatives]), rel=1e-9
    )
    assert test.alternatives[0] == pytest.approx(2.5)
    assert test.alternatives[-1] == pytest.approx(200)
    assert (test.candidate_requests, test.candidate_events, test.baseline_events) == (260, 7, 5)


def test_a_single_edge_pair_is_r1_with_psi0_one_on_exceedances():
    test = ShiftTest.new((1.0, 1.2), max_slowdown=0.2)  # one pair; 1.2 has no partner
    looks = [([3, 5, 10], [40, 60, 100]), ([1, 2, 4], [10, 15, 20])]
    for candidate, baseline in looks:
        test = test.update([(candidate, baseline)])
    ratios = []
    for psi in test.alternatives:
        ratio = 1.0
        for candidate, baseline in looks:
            x_c, x_b = candidate[-1] - candidate[1], baseline[-1] - baseline[0]  # cand > 1.2, base > 1.0
            r = candidate[-1] / (candidate[-1] + baseline[-1])
            ratio *= binom.pmf(x_c, x_c + x_b, theta(psi, r)) / binom.pmf(x_c, x_c + x_b, r)
        ratios.append(ratio)
    assert math.exp(test.log_evalue) == pytest.approx(np.mean(ratios), rel=1e-9)
    assert (test.baseline_requests, test.candidate_requests, test.baseline_exceedances) == (120, 14, (70.0,))


def test_pairs_of_equally_relevant_edges_combine_as_the_uniform_mixture():
    test = ShiftTest.new((1.0, 1.2, 1.44))
    looks = [([5, 7, 9, 10], [50, 70, 85, 100]), ([2, 4, 8, 10], [40, 70, 90, 100])]  # shares in 2-60 %
    for candidate, baseline in looks:
        test = test.update([(candidate, baseline)])
    per_pair = np.array(test.log_lr).reshape(2, -1)
    assert test.log_evalue == pytest.approx(
        logsumexp(logsumexp(per_pair, axis=1) - math.log(12)) - math.log(2)
    )


def test_edge_pairs_are_a_margin_apart_on_rounded_geometric_and_on_vllm_edges():
    first, second = edge_pairs(TTFT_BUCKETS, 0.2)
    assert list(second - first) == [1] * (len(TTFT_BUCKETS) - 1)  # labels rounded to 6 digits still pair up
    first, second = edge_pairs(VLLM_TTFT_EDGES, 0.2)
    pairs = {(VLLM_TTFT_EDGES[i], VLLM_TTFT_EDGES[j]) for i, j in zip(first, second, strict=True)}
    assert {(0.001, 0.005), (0.75, 1.0), (1.0, 2.5), (7.5, 10.0)} <= pairs
    assert all(b >= 1.2 * a for a, b in pairs)
    assert 10.0 not in {a for a, _ in pairs}


def test_the_confidence_sequence_matches_the_research_examples_and_a_grid_search():
    assert error_rate_bounds(0, 0, 0.01, 0.003) == (0.0, 1.0)
    low, high = error_rate_bounds(3, 2000, 0.01, 0.003)
    assert low == pytest.approx(0.00009, rel=0.05)
    assert high == pytest.approx(0.0064, rel=0.02)
    low, high = error_rate_bounds(30, 1000, 0.01, 0.003)
    assert low == pytest.approx(0.0106, rel=0.02)
    assert high == pytest.approx(0.064, rel=0.02)
    for events, requests in [(3, 2000), (0, 500), (40, 40), (12, 300)]:
        grid = np.linspace(1e-6, 1 - 1e-6, 200_001)
        a, b = 1.0, 1 / 0.003 - 1  # the research's inequality, evaluated independently on the grid
        log_lr = betaln(a + events, b + requests - events) - betaln(a, b)
        log_lr -= xlogy(events, grid) + xlogy(requests - events, 1 - grid)
        kept = grid[log_lr < math.log(100)]
        assert beta_binomial_log_lr(events, requests, grid[2000], 0.003) == pytest.approx(
            log_lr[2000], rel=1e-9
        )
        low, high = error_rate_bounds(events, requests, 0.01, 0.003)
        assert low <= kept.min() < low + 1e-5 or (low == 0 and kept.min() == grid[0])
        assert high - 1e-5 < kept.max() <= high or (high == 1 and kept.max() == grid[-1])


def test_detection_floors_match_the_research_table():
    table = {0.01: (0.00506, 909), 0.02: (0.0211, 218), 0.05: (0.0948, 49), 0.20: (0.664, 7)}
    for p1, (kl, floor) in table.items():
        assert kl_bernoulli(p1, 0.003) == pytest.approx(kl, rel=0.01)
        assert requests_to_detect(0.003, p1, 0.01) == pytest.approx(floor, rel=0.03)
    assert requests_needed(0.003, 0.01, 0.005) == pytest.approx(2600, rel=0.02)
    assert detector_log_threshold(5e6, 5.0) == pytest.approx(math.log(1e6))
    assert alpha_log_threshold(0.005) == pytest.approx(math.log(200))
