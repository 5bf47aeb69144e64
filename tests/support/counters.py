"""Increments of the providers' cumulative counters between two looks, as the rollout analysis takes
them (gateway/metrics/observations.py): series by series, a series that fell counting its new value
(a restart), a series first seen counting from 0."""

from __future__ import annotations

import math
from collections import defaultdict

from gateway.metrics.observations import Observations


def increments(before: Observations, after: Observations) -> dict[tuple[str, str, str, float], float]:
    """(variant, signal, stratum, le) -> its series' increments between the looks, summed."""
    assert before.error is None, before.error
    assert after.error is None, after.error
    summed: dict[tuple[str, str, str, float], float] = defaultdict(float)
    for key, value in after.counters.items():
        previous = before.counters.get(key, 0.0)
        summed[key.variant, key.signal, key.stratum, key.le] += (
            value - previous if value >= previous else value
        )
    return dict(summed)


def total(
    counts: dict[tuple[str, str, str, float], float], variant: str, signal: str, le: float = math.inf
) -> float:
    """The increments of `variant`'s `signal` at bound `le`, all strata together."""
    return sum(value for (v, s, _, bound), value in counts.items() if (v, s, bound) == (variant, signal, le))
