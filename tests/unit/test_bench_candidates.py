"""bench/candidates.py: each lane's budget is the rollout's split k ways, and the simulated lanes share the
baseline's counts yet roll back only the candidate that fails."""

from __future__ import annotations

import pytest

from bench.candidates import HEALTHY, budget, interval, lane_plans, rollbacks


def test_each_of_k_lanes_gets_a_kth_of_the_budget_and_k_times_the_detector_horizon() -> None:
    one, three = budget(1), budget(3)
    assert three["tests"] == one["tests"]
    assert three["false_rollback_budget"] == pytest.approx(one["false_rollback_budget"] / 3)
    assert three["alpha"] == pytest.approx(one["alpha"] / 3)
    assert three["mean_time_between_false_alarms_days"] == pytest.approx(
        3 * one["mean_time_between_false_alarms_days"]
    )


def test_a_failing_candidate_is_rolled_back_and_the_healthy_ones_beside_it_are_not() -> None:
    at = rollbacks(lane_plans(3), (0.3, HEALTHY, HEALTHY), runs=10, looks=120, seed=[0])
    assert (at[:, 0] >= 0).all()
    assert (at[:, 1:] < 0).all()


def test_the_interval_holds_the_share_and_is_one_sided_at_zero() -> None:
    low, high = interval(0, 1000)
    assert low == 0.0
    assert high == pytest.approx(1 - 0.025 ** (1 / 1000))
    low, high = interval(10, 1000)
    assert low < 0.01 < high
