"""The error test's confidence sequence, as status and the rollback's reason say it: a rate that moved
during the rollout (healthy through its steps, failing after the promotion) leaves the running
intersection empty, and the words say so instead of an interval whose ends are the wrong way round."""

from __future__ import annotations

from gateway.rollout.checks.errors import confidence
from gateway.rollout.sequential.budget import error_rate_bounds


def test_a_rate_that_moved_is_said_to_have_moved():
    healthy = error_rate_bounds(0, 3000, 0.01, 0.003)
    failing = error_rate_bounds(600, 3200, 0.01, 0.003)
    lower, upper = max(healthy[0], failing[0]), min(healthy[1], failing[1])
    assert lower > upper
    said = confidence(lower, upper)
    assert said.startswith("CS empty: no one error rate fits the whole rollout (some looks put it below 0.")
    assert confidence(*healthy) == f"CS [0.000%, {healthy[1]:.3%}]"
