"""The rank test on exact per-request latencies (ExactShiftTest): closed forms, simulated validity and power.

Simulations call the shipped kernel (`rank_increments`) over many runs at once, with fixed seeds;
false-alarm fractions are compared with their bound plus three binomial standard errors.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import rankdata

from bench.exact_rules import candidate_ranks
from gateway.rollout.sequential import (
    ExactShiftTest,
    alpha_log_threshold,
    by_stratum,
    detector_log_threshold,
    mixture,
    pooled_ranks,
    rank_increments,
    shiryaev_roberts_step,
)

SIGMA = 0.6  # lognormal TTFT spread, as the decision benchmark's


def slack(bound: float, runs: int) -> float:
    return bound + 3 * math.sqrt(bound * (1 - bound) / runs)


def lognormal(rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    return 0.4 * scale * rng.lognormal(0.0, SIGMA, n)


# --- closed forms ---------------------------------------------------------------------------------


def test_pooled_ranks_are_the_ranks_of_the_scaled_candidate_with_ties_in_its_favour():
    rng = np.random.default_rng(1)
    candidate, baseline = lognormal(rng, 9), lognormal(rng, 40)
    ranks = pooled_ranks(candidate, baseline, 0.2)
    expected = np.sort(rankdata(np.concatenate([candidate / 1.2, baseline]))[:9])
    np.testing.assert_array_equal(ranks, expected)
    # 1.2 / 1.2 ties the baseline's 1.0: the candidate ranks below it; candidates tied with each other
    # take consecutive ranks
    np.testing.assert_array_equal(
        pooled_ranks(np.array([1.2, 0.6, 0.6]), np.array([1.0, 0.4]), 0.2), [2, 3, 4]
    )


def test_increments_are_tilted_score_sums_over_the_mean_tilt_of_all_pooled_ranks():
    test = ExactShiftTest.new(0.2)
    bets, levels = np.asarray(test.alternatives), np.asarray(test.levels)
    ranks = np.array([[6, 15, 19, 20, 24, 28, 35], [2, 3, 0, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0, 0]])
    pooled = np.array([37, 5, 2])  # the last stratum has no baseline request: it contributes nothing
    increments = rank_increments(bets, levels, ranks, pooled)
    assert increments.shape == (1 + len(levels), len(bets))

    def score(f: int, r: np.ndarray, size: int) -> np.ndarray:
        return r / (size + 1) if f == 0 else (r > levels[f - 1] * (size + 1)).astype(float)

    for f in range(1 + len(levels)):
        for k, bet in enumerate(bets):
            by_hand = 0.0
            for row, size in zip(ranks[:2], pooled[:2], strict=True):
                taken = row[row > 0]
                everyone = np.arange(1, size + 1)
                by_hand += bet * score(f, taken, size).sum() - len(taken) * math.log(
                    np.mean(np.exp(bet * score(f, everyone, size)))
                )
            assert increments[f, k] == pytest.approx(by_hand, rel=1e-9, abs=1e-12)


def test_the_state_mixes_scores_and_bets_equally_and_runs_the_shiryaev_roberts_recursion():
    rng = np.random.default_rng(2)
    test = ExactShiftTest.new(0.2)
    assert test.log_detector == -math.inf
    bets, levels = np.asarray(test.alternatives), np.asarray(test.levels)
    total, sr = np.zeros((1 + len(levels), len(bets))), np.zeros((1 + len(levels), len(bets)))
    for look in range(6):
        strata = [
            (lognormal(rng, 3, 1.5), lognormal(rng, 30)),
            (lognormal(rng, look % 2), lognormal(rng, 12)),
        ]
        test = test.update(strata)
        kept = [(c, b) for c, b in strata if len(c)]
        width = max(len(c) for c, _ in kept)
        ranks = np.zeros((len(kept), width))
        for i, (c, b) in enumerate(kept):
            ranks[i, : len(c)] = rankdata(np.concatenate([c / 1.2, b]))[: len(c)][np.argsort(c)]
        inc = rank_increments(bets, levels, ranks, np.array([len(c) + len(b) for c, b in kept]))
        total += inc
        sr = inc if look == 0 else np.logaddexp(sr, 0.0) + inc
    assert test.log_evalue == pytest.approx(float(mixture(total.ravel())), rel=1e-9)
    assert test.log_detector == pytest.approx(float(mixture(sr.ravel())), rel=1e-9)
    assert test.steps == 6


def test_looks_without_both_sides_change_nothing_and_states_round_trip_through_strict_json():
    rng = np.random.default_rng(3)
    fresh = ExactShiftTest.new()
    assert fresh.update([]) == fresh
    assert fresh.update([([], [0.3, 0.4]), ([0.5], [])]) == fresh
    test = fresh.update([(lognormal(rng, 4), lognormal(rng, 50)), ([0.5], [])])
    assert (test.candidate_requests, test.baseline_requests, test.steps) == (4, 50, 1)
    text = json.dumps(test.to_dict(), allow_nan=False)
    assert ExactShiftTest.from_dict(json.loads(text)) == test


def test_strata_pair_by_name_and_only_where_both_variants_were_reached():
    ours = {"default|long": [0.9], "default|short": [0.2, 0.3], "pinned|short": [0.1], "default|mid": []}
    theirs = {"default|short": [0.25], "default|long": [1.0, 1.1], "default|mid": [0.5]}
    assert by_stratum(ours, theirs) == [([0.9], [1.0, 1.1]), ([0.2, 0.3], [0.25])]


@pytest.mark.parametrize(
    ("update", "field"),
    [
        (lambda t: t.update([([0.3, math.nan], [0.4])]), r"strata\[0\]\.candidate.*finite"),
        (lambda t: t.update([([0.3], [0.4]), ([0.3], [math.inf])]), r"strata\[1\]\.baseline.*finite"),
        (lambda t: t.update([([0.3, -0.1], [0.4])]), r"strata\[0\]\.candidate.*>= 0"),
        (lambda t: t.update([([[0.3, 0.2]], [0.4])]), r"strata\[0\]\.candidate.*shape"),
        (lambda t: t.update([([0.3], [0.4], [0.5])]), r"strata\[0\]: expected \(candidate values"),
        (lambda t: t.update([(["slow"], [0.4])]), "could not convert"),
        (lambda _: ExactShiftTest.new(-0.1), "max_slowdown"),
        (lambda _: ExactShiftTest.new(math.nan), "max_slowdown"),
    ],
)
def test_bad_values_and_parameters_are_refused_naming_what(update, field):
    with pytest.raises(ValueError, match=field):
        update(ExactShiftTest.new())


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"levels": [0.5, 1.5, 0.99]}, r"ExactShiftTest\.levels"),
        ({"log_lr": [0.0]}, r"ExactShiftTest\.log_lr"),
        ({"log_sr": [0.0] * 19 + [None]}, r"ExactShiftTest\.log_sr\[19\]"),
        ({"alternatives": []}, r"ExactShiftTest\.alternatives"),
        ({"steps": 10}, r"ExactShiftTest\.steps"),
    ],
)
def test_malformed_states_are_refused_naming_the_field(change, field):
    data = ExactShiftTest.new().update([([0.3, 0.5], [0.4, 0.2, 0.6])]).to_dict() | change
    with pytest.raises(ValueError, match=field):
        ExactShiftTest.from_dict(data)


# --- simulation: the benchmark's rank draws, validity at the null, power ------------------------------


def test_the_benchmarks_rank_draws_match_ranks_of_drawn_values_in_law():
    rng = np.random.default_rng(4)
    looks, slowdown = 4000, 1.5
    cand_n, base_n = rng.poisson(3, looks), rng.poisson(40, looks)
    drawn, _ = candidate_ranks(rng, cand_n, base_n, math.log(slowdown / 1.2) / SIGMA)
    drawn_sums = drawn.sum(axis=1)
    value_sums = np.array(
        [
            pooled_ranks(lognormal(rng, c, slowdown), lognormal(rng, b), 0.2).sum()
            for c, b in zip(cand_n, base_n, strict=True)
        ]
    )
    error = math.hypot(drawn_sums.std(), value_sums.std()) / math.sqrt(looks)
    assert abs(drawn_sums.mean() - value_sums.mean()) < 4 * error
    assert drawn_sums.std() == pytest.approx(value_sums.std(), rel=0.1)


def simulate(
    slowdown: float, cand_per_look: float, base_per_look: float, looks: int, runs: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The log e-value and the detector's log statistic after every look (looks, runs), through the
    shipped kernel and recursion; two prompt-size strata."""
    rng = np.random.default_rng(seed)
    test = ExactShiftTest.new(0.2)
    bets, levels = np.asarray(test.alternatives), np.asarray(test.levels)
    shift = math.log(slowdown / 1.2) / SIGMA
    log_lr = np.zeros((runs, len(test.log_lr)))
    log_sr, started = np.zeros_like(log_lr), np.zeros(runs, dtype=bool)
    evalues, detectors = np.empty((looks, runs)), np.empty((looks, runs))
    for look in range(looks):
        strata = [candidate_ranks(rng, rng.poisson(cand_per_look / 2, runs), rng.poisson(base_per_look / 2, runs),
                                  shift) for _ in range(2)]  # fmt: skip
        width = max(r.shape[1] for r, _ in strata)
        ranks = np.stack([np.pad(r, ((0, 0), (0, width - r.shape[1]))) for r, _ in strata], axis=1)
        pooled = np.stack([p for _, p in strata], axis=1)
        inc = rank_increments(bets, levels, ranks, pooled).reshape(runs, -1)
        present = (ranks > 0).sum(axis=-1)
        compared = ((present > 0) & (pooled > present)).any(axis=1)
        log_lr += inc
        log_sr = shiryaev_roberts_step(log_sr, started, compared, inc)
        started |= compared
        evalues[look] = mixture(log_lr)
        detectors[look] = np.where(started, mixture(log_sr), -np.inf)
    return evalues, detectors


@pytest.mark.parametrize(
    ("cand_per_look", "base_per_look", "looks", "runs"),
    [(1.0, 1.0, 2000, 600), (5.0, 95.0, 720, 1000), (400.0, 7600.0, 40, 300)],
    ids=["one-a-look-each", "1-req-s-at-5-percent", "huge-looks"],
)
def test_at_the_margin_false_alarms_stay_within_alpha_and_the_detectors_within_h_over_a(
    cand_per_look, base_per_look, looks, runs
):
    """A candidate exactly 1.2x slower is the worst null: the bound must hold there, over many looks."""
    alpha, arl = 0.05, 2000
    evalues, detectors = simulate(1.2, cand_per_look, base_per_look, looks, runs, seed=5)
    assert np.mean((evalues >= alpha_log_threshold(alpha)).any(axis=0)) <= slack(alpha, runs)
    horizon = min(looks, 200)
    assert np.mean((detectors[:horizon] >= math.log(arl)).any(axis=0)) <= slack(horizon / arl, runs)


def test_an_equal_or_faster_candidate_is_never_rolled_back_in_six_hours_of_looks():
    for slowdown in (1.0, 0.8):
        evalues, detectors = simulate(slowdown, 5.0, 95.0, 4320, 40, seed=6)
        assert (evalues < alpha_log_threshold(0.002)).all()
        assert (detectors < detector_log_threshold(90 * 86400, 5.0)).all()
        assert (evalues[-1] < 0).all()  # the evidence runs the other way


def test_a_one_and_a_half_times_slower_candidate_is_caught_within_three_minutes_at_4_rps():
    evalues, _ = simulate(1.5, 20.0, 380.0, 36, 300, seed=7)
    assert np.mean((evalues >= alpha_log_threshold(0.002)).any(axis=0)) >= 0.95


def test_the_state_catches_a_slowdown_that_begins_after_healthy_hours_by_its_detector():
    """Two healthy hours leave the cumulative e-value far below 0; the change detector forgets them."""
    rng = np.random.default_rng(8)
    test = ExactShiftTest.new(0.2)
    onset, detector_at = 1440, None
    for look in range(onset + 24):
        slowdown = 2.0 if look >= onset else 1.0
        test = test.update([(lognormal(rng, rng.poisson(20), slowdown), lognormal(rng, rng.poisson(80)))])
        if (
            look >= onset
            and detector_at is None
            and test.log_detector >= detector_log_threshold(90 * 86400, 5.0)
        ):
            detector_at = look - onset
    assert test.log_evalue < alpha_log_threshold(0.002)
    assert detector_at is not None
    assert detector_at <= 6  # within 30 s of the onset at 4 req/s
