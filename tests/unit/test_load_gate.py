"""The latency checks compare a look only where the candidate's pods were, with confidence, no busier than
the baseline's (gateway/rollout/checks/latency.py). Simulated by the shipped functions on Poisson traffic
(bench/load_gate.py), one pod each, against the gate that shipped before on the same traffic."""

from __future__ import annotations

import numpy as np
from pydantic import TypeAdapter

from bench.load_gate import LOOKS, STAGE, WARM, one_run
from gateway.rollout.checks.latency import LatencyTests
from gateway.rollout.load_share import Window

RUNS = 40


def compared_share(rate: float, segments: tuple[tuple[int, float], ...], gate: str, start: int) -> np.ndarray:
    """Per run: the share of the candidate's requests from look `start` on whose latency was compared."""
    runs = [one_run(rate, segments, seed) for seed in range(RUNS)]
    return np.array([sum(run[gate][start:]) / max(sum(run["sent"][start:]), 1) for run in runs])


def test_an_even_split_at_two_and_five_requests_a_second_is_compared():
    """The gate before held a 30-look window: at 2 requests a second it never held enough to tell an even
    split from a busier candidate, and compared about one request in seven (CI's first-token test once
    waited 91 s for a rollback that takes 8)."""
    for rate, before, now in ((2.0, 0.3, 0.6), (5.0, 0.6, 0.85)):
        assert np.median(compared_share(rate, ((LOOKS, 1.0),), "looks", WARM)) < before
        assert np.median(compared_share(rate, ((LOOKS, 1.0),), "requests", WARM)) > now


def test_a_busier_candidate_is_not_compared_and_a_stage_that_makes_it_busier_stops_the_comparison():
    """70/30 over one pod each loads the candidate's pod 2.3 times as much. After a stage moves 20 % to 70 %
    the long window still remembers the lighter share; the short one must close the gate within a minute,
    in nine runs of ten."""
    for rate in (2.0, 10.0, 50.0):
        assert np.quantile(compared_share(rate, ((LOOKS, 7 / 3),), "requests", WARM), 0.9) < 0.01
        after = compared_share(rate, ((STAGE, 0.25), (LOOKS - STAGE, 7 / 3)), "requests", STAGE + 60)
        assert np.quantile(after, 0.9) == 0, after


def test_a_state_saved_before_the_windows_kept_their_squares_resumes_its_counts():
    saved = {"load": [751.0, 3004.0], "busier_looks": 2, "kind": "latency"}
    tests = TypeAdapter(LatencyTests).validate_python(saved)
    assert tests.load == Window(751.0, 3004.0, (751.0 + 3004.0) / 2)  # a decayed sum's steady spread
    assert tests.recent == Window()
    assert tests.busier_looks == 2
