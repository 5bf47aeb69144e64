"""Increments of the providers' cumulative counters between two looks, as the rollout analysis takes
them (gateway/metrics/observations.py): series by series, a series that fell counting its new value
(a restart), a series first seen counting from 0."""

from __future__ import annotations

import math

from gateway.metrics.observations import Observations
from gateway.rollout.increments import increase


def increments(before: Observations, after: Observations) -> dict[tuple[str, str, str, float], float]:
    """(variant, signal, stratum, le) -> its series' increments between the looks, summed (the
    controller's own code, gateway/rollout/increments.py)."""
    assert before.error is None, before.error
    assert after.error is None, after.error
    return dict(increase(before.counters, after.counters))


def total(
    counts: dict[tuple[str, str, str, float], float], variant: str, signal: str, le: float = math.inf
) -> float:
    """The increments of `variant`'s `signal` at bound `le`, all strata together."""
    return sum(value for (v, s, _, bound), value in counts.items() if (v, s, bound) == (variant, signal, le))
