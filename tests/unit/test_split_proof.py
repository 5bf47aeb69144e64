"""The data plane's split proof (gateway/rollout/sequential/split.py), by simulation of the real code: a
data plane that serves the asked share is almost never refuted, one that serves another share almost
never shown, at 1 %, 5 % and 50 % over thousands of answers looked at every ten; and a canary whose
traffic goes nowhere is refuted within a couple of hundred answers, with the counts said."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.rollout.sequential.split import Proof, SplitTest, band, proofs

ALPHA = 0.05  # generous, so that the simulated rates are measurable in a unit test's time
RUNS, PER_LOOK = 2000, 10  # a look every 10 answers


def ever(
    true_share: float, asked: float, seed: int, looks: int = 300
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run, over `looks` looks: whether the split was ever shown, ever refuted, and the answers at
    the first proof."""
    rng = np.random.default_rng(seed)
    candidate = np.zeros(RUNS, dtype=np.int64)
    shown, refuted = np.zeros(RUNS, bool), np.zeros(RUNS, bool)
    first = np.zeros(RUNS, dtype=np.int64)
    for look in range(1, looks + 1):
        candidate += rng.binomial(PER_LOOK, true_share, RUNS)
        found = proofs(candidate, np.full(RUNS, look * PER_LOOK), asked, ALPHA)
        first = np.where((first == 0) & (found != 0), look * PER_LOOK, first)
        shown |= found == 1
        refuted |= found == -1
    return shown, refuted, first


def limit(rate: float) -> float:
    """`rate` plus three binomial standard errors over RUNS: what a simulated rate may reach by chance."""
    return rate + 3 * np.sqrt(rate * (1 - rate) / RUNS)


@pytest.mark.parametrize(("asked", "answers"), [(0.01, 20_000), (0.05, 3_000), (0.5, 3_000)])
def test_the_asked_split_served_is_refuted_at_most_alpha_and_usually_shown(asked, answers):
    """1 % takes the longest to show: its band is 0.5-1.5 %, and one answer in a hundred is the canary's."""
    shown, refuted, _ = ever(asked, asked, seed=int(asked * 1000), looks=answers // PER_LOOK)
    assert refuted.mean() <= limit(ALPHA)
    assert shown.mean() > 0.9


@pytest.mark.parametrize(("asked", "served"), [(0.05, 0.01), (0.05, 0.12), (0.5, 0.35), (0.01, 0.0)])
def test_another_split_served_is_shown_at_most_alpha_and_refuted(asked, served):
    shown, refuted, _ = ever(served, asked, seed=7)
    assert shown.mean() <= limit(ALPHA)
    assert refuted.mean() > 0.9


def test_a_share_at_the_bands_edge_is_neither_shown_nor_refuted_more_than_alpha():
    low, high = band(0.05)
    for served in (low, high):
        shown, refuted, _ = ever(served, 0.05, seed=11)
        assert max(shown.mean(), refuted.mean()) <= limit(ALPHA)


def test_a_canary_whose_traffic_goes_nowhere_is_refuted_within_a_few_hundred_answers():
    _, refuted, first = ever(0.0, 0.05, seed=3)
    assert refuted.all()
    # 0 of n against the band's floor of 2.5 %: log(19 / (19 + n)) - n log(0.975) reaches log(1/alpha) at 220
    assert np.max(first) <= 250
    test = SplitTest(0.05).add(0, 612)
    assert test.proof(0.01) == Proof.REFUTED
    assert (
        test.describe()
        == "5% asked, 0 of 612 answers from the candidate's endpoints (shown within 2.5%-7.5%)"
    )


def test_nought_and_all_are_shown_by_answers_that_stay_put():
    assert SplitTest(0.0).add(0, 2000).proof(0.01) == Proof.SHOWN
    assert SplitTest(1.0).add(2000, 2000).proof(0.01) == Proof.SHOWN
    assert SplitTest(0.0).add(40, 2000).proof(0.01) == Proof.REFUTED  # 2 % where none was asked
    assert SplitTest(0.0).add(0, 10).proof(0.01) == Proof.PENDING


def test_bad_counts_are_refused_with_what_was_wrong():
    with pytest.raises(ValueError, match="candidate"):
        SplitTest(0.05).add(11, 10)
    with pytest.raises(ValueError, match="asked"):
        SplitTest(1.5)
