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
    shiryaev_roberts_looks,
    shiryaev_roberts_step,
    threshold_increments,
    threshold_look,
)
from inference.server.telemetry import TTFT_BUCKETS

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


# --- state handling ---------------------------------------------------------------------------------


def updated_states() -> list[ThresholdTest | RatioTest | ShiftTest]:
    shift = ShiftTest.new(VLLM_TTFT_EDGES).update(
        [([0, 1, 1, 2, 5, 9, 12, 20, 40, 55, 60, 61, 70, 71, 71, 71, 80], [0] * 17)]
    )
    return [
        ThresholdTest.new(0.003).update(80, 2).update(75, 0),
        RatioTest.new().update([(40, 1, 760, 2), (3, 0, 57, 1)]),
        shift.update([([0] * 12 + [3] * 5, [0] * 10 + [5, 7, 9, 12, 12, 12, 12])]),
    ]


@pytest.mark.parametrize("state", updated_states(), ids=lambda s: type(s).__name__)
def test_states_round_trip_through_strict_json(state):
    text = json.dumps(state.to_dict(), allow_nan=False)
    assert type(state).from_dict(json.loads(text)) == state


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"requests": -1}, "ThresholdTest.requests"),
        ({"requests": "80"}, "ThresholdTest.requests"),
        ({"events": True}, "ThresholdTest.events"),
        ({"events": 10**6}, "ThresholdTest.events"),
        ({"log_lr": [0.0]}, "ThresholdTest.log_lr"),
        ({"log_sr": [0.0] * 9 + ["x"]}, r"ThresholdTest.log_sr\[9\]"),
        ({"alternatives": [0.001] * 10}, "ThresholdTest.alternatives"),
        ({"p0": None}, "ThresholdTest.p0"),
        ({"surplus": 1}, "surplus"),
    ],
)
def test_malformed_state_is_refused_naming_the_field(change, field):
    data = ThresholdTest.new(0.003).update(80, 1).to_dict() | change
    with pytest.raises(ValueError, match=field):
        ThresholdTest.from_dict(data)


def test_other_malformed_states_are_refused():
    shift, ratio = updated_states()[2], updated_states()[1]
    with pytest.raises(ValueError, match=r"ShiftTest\.baseline_exceedances"):
        ShiftTest.from_dict(shift.to_dict() | {"baseline_exceedances": [0.0]})
    with pytest.raises(ValueError, match=r"ShiftTest\.edges"):
        ShiftTest.from_dict(shift.to_dict() | {"edges": [2.0, 1.0]})
    with pytest.raises(ValueError, match=r"RatioTest\.log_lr"):
        RatioTest.from_dict({k: v for k, v in ratio.to_dict().items() if k != "log_lr"})
    with pytest.raises(ValueError, match="expected a mapping"):
        RatioTest.from_dict([1, 2])


def test_updates_return_new_states_and_empty_looks_change_nothing():
    test = ThresholdTest.new(0.003)
    assert test.update(0, 0) == test
    later = test.update(10, 1)
    assert (test.requests, later.requests) == (0, 10)
    assert RatioTest.new().update([(0, 0, 100, 1), (10, 0, 0, 0)]) == RatioTest.new()
    assert ShiftTest.new((1.0, 1.2)).update([]) == ShiftTest.new((1.0, 1.2))


@pytest.mark.parametrize(
    ("update", "field"),
    [
        (lambda: ThresholdTest.new(0.003).update(5, 6), "events"),
        (lambda: ThresholdTest.new(0.003).update(-5, 0), "requests"),
        (lambda: ThresholdTest.new(0.003).update(5.5, 0), "requests"),
        (lambda: RatioTest.new().update([(10, 0, 10, 11)]), r"strata\[0\].baseline_events"),
        (lambda: RatioTest.new().update([(10, 0, 10)]), r"strata\[0\]"),
        (lambda: ShiftTest.new((1.0, 1.2)).update([([1, 2], [1, 2, 3])]), r"strata\[0\].candidate"),
        (lambda: ShiftTest.new((1.0, 1.2)).update([([1, 2, 3], [2, 1, 3])]), r"strata\[0\].baseline"),
        (lambda: ShiftTest.new((1.0, 1.2)).update([([1, 2, 3.5], [1, 2, 3])]), r"strata\[0\].candidate"),
        (lambda: ShiftTest.new((1.0, 1.1)), "edges"),
        (lambda: ThresholdTest.new(1.0), "p0"),
    ],
)
def test_bad_increments_and_parameters_are_refused(update, field):
    with pytest.raises(ValueError, match=field):
        update()


# --- simulation: validity at the null boundary, and power --------------------------------------------


def log_mean(log_values: np.ndarray) -> np.ndarray:
    return logsumexp(log_values, axis=-1) - math.log(log_values.shape[-1])


def simulate_threshold(p0: float, rate, per_look: float, looks: int, runs: int, seed: int):
    """E1 and E2 (log) after every look, for `runs` runs: arrays (looks, runs)."""
    rng = np.random.default_rng(seed)
    grid = np.array(ThresholdTest.new(p0).alternatives)
    lr, sr = np.zeros((runs, len(grid))), np.zeros((runs, len(grid)))
    started = np.zeros(runs, dtype=bool)
    e1, e2 = np.empty((looks, runs)), np.empty((looks, runs))
    for look in range(looks):
        n = rng.poisson(per_look, runs)
        x = rng.binomial(n, rate(look))
        lr, sr = threshold_look(p0, grid, lr, sr, started, n, x)
        started |= n > 0
        e1[look], e2[look] = log_mean(lr), np.where(started, log_mean(sr), -np.inf)
    return e1, e2


def test_e1_and_e2_at_the_threshold_keep_their_false_alarm_bounds():
    alpha, arl, horizon, runs = 0.05, 1000, 100, 2000
    e1, e2 = simulate_threshold(0.05, lambda _: 0.05, 20, 400, runs, seed=1)
    assert np.mean((e1 >= alpha_log_threshold(alpha)).any(axis=0)) <= slack(alpha, runs)
    assert np.mean((e2[:horizon] >= math.log(arl)).any(axis=0)) <= slack(horizon / arl, runs)


def test_e1_catches_5_percent_errors_at_16_rps_within_a_minute():
    e1, _ = simulate_threshold(0.003, lambda _: 0.05, 16 * 5, 12, 500, seed=2)
    assert np.mean((e1 >= alpha_log_threshold(0.005)).any(axis=0)) >= 0.99


def test_e2_catches_a_late_regression_within_a_minute_of_its_onset():
    onset = 120  # ten healthy minutes at 0.1 %, then 5 %
    _, e2 = simulate_threshold(
        0.003, lambda look: 0.001 if look < onset else 0.05, 16 * 5, onset + 12, 500, seed=3
    )
    threshold = detector_log_threshold(58 * 86400, 5.0)
    assert not (e2[:onset] >= threshold).any()
    assert np.mean((e2[onset:] >= threshold).any(axis=0)) >= 0.95


def simulate_ratio(psi0: float, cand_rate, base_rate, share, total_rps, looks: int, runs: int, seed: int):
    """R1 (log) after every look; two strata (segments) whose error rates differ by 3x."""
    rng = np.random.default_rng(seed)
    grid = np.array(RatioTest.new(psi0).alternatives)
    lr, out = np.zeros((runs, len(grid))), np.empty((looks, runs))
    segments = np.array([1.0, 3.0])
    for look in range(looks):
        n = rng.poisson(total_rps(look) * 5 / 2, (runs, 2))
        nc = rng.binomial(n, share(look))
        nb = n - nc
        xc = rng.binomial(nc, np.minimum(cand_rate(look) * segments, 1))
        xb = rng.binomial(nb, np.minimum(base_rate(look) * segments, 1))
        lr = ratio_look(psi0, grid, lr, nc, xc, nb, xb)
        out[look] = log_mean(lr)
    return out


def test_r1_at_equal_rates_stays_valid_through_stage_changes_traffic_swings_and_shared_bursts():
    alpha, runs = 0.05, 2000
    rate = lambda look: 0.05 if look % 180 < 12 else 0.002  # noqa: E731 - a burst every 15 min, both arms
    share = lambda look: (0.05, 0.2, 0.5)[min(look // 180, 2)]  # noqa: E731
    traffic = lambda look: 40 + 32 * math.sin(look / 60)  # noqa: E731 - 8 to 72 req/s
    r1 = simulate_ratio(1.0, rate, rate, share, traffic, 540, runs, seed=4)
    assert np.mean((r1 >= alpha_log_threshold(alpha)).any(axis=0)) <= slack(alpha, runs)


def test_r1_catches_5_percent_errors_against_a_good_baseline_within_a_minute():
    r1 = simulate_ratio(2.0, lambda _: 0.05, lambda _: 0.001, lambda _: 0.2, lambda _: 80, 12, 500, seed=5)
    assert np.mean((r1 >= alpha_log_threshold(0.005)).any(axis=0)) >= 0.99


def simulate_shift(slowdown: float, cand_rps: float, base_rps: float, looks: int, runs: int, seed: int):
    """L2's wealth and the plain uniform mixture over pairs after every look, for lognormal TTFT
    (sigma 0.6) binned into graystack's TTFT buckets, in two prompt-length strata with medians 0.3 / 0.8 s."""
    rng = np.random.default_rng(seed)
    edges = np.array(TTFT_BUCKETS)
    pairs = edge_pairs(edges, 0.2)
    grid = np.array(ShiftTest.new(edges).alternatives)
    lr, wealth = np.zeros((runs, len(pairs[0]), len(grid))), np.zeros(runs)
    exceedances, base_requests = np.zeros((runs, len(pairs[0]))), np.zeros(runs)

    def buckets(median: float) -> np.ndarray:
        return np.diff(norm.cdf((np.log(edges) - math.log(median)) / 0.6), prepend=0, append=1)

    medians = (0.3, 0.8)
    wealths, uniform = np.empty((looks, runs)), np.empty((looks, runs))
    for look in range(looks):
        draws = [
            [
                np.cumsum(rng.multinomial(rng.poisson(rps * 5 / 2, runs), buckets(m * scale)), axis=-1)
                for m in medians
            ]
            for rps, scale in ((cand_rps, slowdown), (base_rps, 1.0))
        ]
        candidate, baseline = (np.stack(d, axis=1).astype(float) for d in draws)
        lr, wealth, exceedances, base_requests = shift_look(
            pairs, grid, lr, wealth, exceedances, base_requests, candidate, baseline
        )
        wealths[look], uniform[look] = wealth, log_mean(log_mean(lr))
    return wealths, uniform


def test_l2_with_a_candidate_exactly_the_margin_slower_stays_valid():
    alpha, runs = 0.05, 300
    wealth, uniform = simulate_shift(1.2, 8, 32, 150, runs, seed=6)
    for statistic in (wealth, uniform):
        assert np.mean((statistic >= alpha_log_threshold(alpha)).any(axis=0)) <= slack(alpha, runs)


def test_l2_catches_a_doubled_ttft_at_16_rps_within_a_minute():
    wealth, _ = simulate_shift(2.0, 16, 64, 12, 300, seed=7)
    assert np.mean((wealth >= alpha_log_threshold(0.0025)).any(axis=0)) >= 0.99


def test_l2_weighting_pairs_by_relevance_detects_sooner_than_the_uniform_mixture():
    threshold = alpha_log_threshold(0.0025)
    wealth, uniform = simulate_shift(1.5, 4, 16, 60, 300, seed=8)

    def first_crossings(statistic: np.ndarray) -> np.ndarray:
        crossed = statistic >= threshold
        return np.where(crossed.any(axis=0), crossed.argmax(axis=0), np.inf)

    relevance, plain = first_crossings(wealth), first_crossings(uniform)
    assert np.median(relevance) < np.median(plain)
    assert np.mean(relevance <= plain) >= 0.9
    assert np.mean(np.isfinite(relevance)) >= 0.9


def test_the_batched_shiryaev_roberts_recursion_is_the_look_by_look_one():
    """The decision benchmark runs E2 over hours of looks at once; it must be the controller's recursion."""
    rng = np.random.default_rng(11)
    runs, looks, k = 50, 300, 10
    alternatives = np.asarray(ThresholdTest.new(0.003).alternatives)
    requests = rng.poisson(3.0, (runs, looks)) * (rng.random((runs, looks)) < 0.7)  # some looks empty
    events = rng.binomial(requests, 0.01)
    inc = threshold_increments(0.003, alternatives, requests, events)
    for started in (np.zeros(runs, dtype=bool), np.ones(runs, dtype=bool)):
        log_sr = np.where(started[:, None], rng.normal(0, 2, (runs, k)), 0.0)
        batched = shiryaev_roberts_looks(log_sr, started, requests > 0, inc)
        state, begun = log_sr, started
        for j in range(looks):
            state = shiryaev_roberts_step(state, begun, requests[:, j] > 0, inc[:, j])
            begun = begun | (requests[:, j] > 0)
            np.testing.assert_allclose(
                np.where(begun[:, None], batched[:, j], 0),
                np.where(begun[:, None], state, 0),
                rtol=1e-9,
                atol=1e-9,
            )


def test_l2s_change_detector_catches_a_slowdown_that_begins_after_healthy_hours():
    """Two healthy hours leave the cumulative wealth far below 0; the detector forgets them."""
    rng = np.random.default_rng(12)
    edges = np.array(TTFT_BUCKETS)
    test = ShiftTest.new(edges, 0.2)

    def buckets(scale: float, n: int) -> list[float]:
        probabilities = np.diff(norm.cdf((np.log(edges) - math.log(0.4 * scale)) / 0.6), prepend=0, append=1)
        return np.cumsum(rng.multinomial(n, probabilities)).tolist()

    onset, detector_at, evalue_at = 1440, None, None  # 5 s looks: 2 h, then the candidate 2x slower
    for look in range(onset + 120):
        slowdown = 2.0 if look >= onset else 1.0
        test = test.update([(buckets(slowdown, rng.poisson(80)), buckets(1.0, rng.poisson(320)))])
        if look < onset:
            continue
        if detector_at is None and test.log_detector >= detector_log_threshold(90 * 86400, 5.0):
            detector_at = look - onset
        if evalue_at is None and test.log_evalue >= alpha_log_threshold(0.002):
            evalue_at = look - onset
    assert test.steps == onset + 120
    assert detector_at is not None
    assert detector_at <= 6  # within 30 s of the onset at 16 req/s
    assert evalue_at is None or evalue_at > detector_at
    assert ShiftTest.from_dict(json.loads(json.dumps(test.to_dict()))) == test
