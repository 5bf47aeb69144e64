"""How a variant's pods are ranked (pure): each scorer gives every candidate a score in [0, 1], higher
better; a pod's total is the weighted sum (the spec's `endpoint_picker.scorers`), the highest first, ties
in turn. After llm-d's scorers (queue depth, KV-cache use, active requests, session affinity):
  - `in_flight`: the requests the picker has in flight on the pod, least first: what exists now, known
    for every pod;
  - `queue`: the requests waiting in the server's own queue, least first;
  - `kv_cache`: 1 - the fraction of the server's KV cache in use;
  - `session`: 1 for the pod that last served the request's cohort key (its conversation's KV cache is
    likely still there), 0 for the others.
A pod with no fresh reading of its metrics is scored on `queue` and `kv_cache` as `in_flight` scores it:
what the picker counts itself stands in for what the server would have said.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gateway.epp.readings import Reading
from gateway.spec.endpoint_picker import SCORERS


@dataclass(frozen=True)
class Signals:
    """What a pick knows: its own counts, the fresh readings, and the cohort's last pod."""

    in_flight: Mapping[str, int]
    readings: Mapping[str, Reading]
    last_served: str | None = None


Scorer = Callable[[Sequence[str], Signals], dict[str, float]]


def fewest(values: Mapping[str, float]) -> dict[str, float]:
    """1 for the least, 0 for the most, linear between (llm-d's queue scorer); all 1 when they are equal."""
    low, high = min(values.values()), max(values.values())
    if high == low:
        return dict.fromkeys(values, 1.0)
    return {key: (high - value) / (high - low) for key, value in values.items()}


def in_flight(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    return fewest({endpoint: float(signals.in_flight.get(endpoint, 0)) for endpoint in endpoints})


def queue(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    """Normalised over the pods that report a queue; the others take their in-flight score."""
    read = {e: r.queue for e in endpoints if (r := signals.readings.get(e)) and r.queue is not None}
    return {**in_flight(endpoints, signals), **(fewest(read) if read else {})}


def kv_cache(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    fallback = in_flight(endpoints, signals)
    scores = {}
    for endpoint in endpoints:
        reading = signals.readings.get(endpoint)
        used = reading.kv_cache if reading is not None else None
        scores[endpoint] = fallback[endpoint] if used is None else 1.0 - min(max(used, 0.0), 1.0)
    return scores


def session(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    return {endpoint: float(endpoint == signals.last_served) for endpoint in endpoints}


TABLE: dict[str, Scorer] = {"in_flight": in_flight, "queue": queue, "kv_cache": kv_cache, "session": session}
assert set(TABLE) == set(SCORERS), "the spec's scorers and these differ"


def rank(endpoints: Sequence[str], signals: Signals, weights: Mapping[str, float], turn: int) -> list[str]:
    """`endpoints`, the highest weighted score first; ties taken in turn (rotated by `turn`), so that an
    idle variant is not all sent to its first pod. A scorer weighted 0 is not run."""
    start = turn % len(endpoints)
    rotated = [*endpoints[start:], *endpoints[:start]]
    total = dict.fromkeys(rotated, 0.0)
    for name, weight in weights.items():
        if weight > 0:
            for endpoint, score in TABLE[name](rotated, signals).items():
                total[endpoint] += weight * score
    return sorted(rotated, key=lambda endpoint: -total[endpoint])


class Recent:
    """A bounded map, least recently set dropped first: cohort key -> the pod that last served it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str) -> str | None:
        return self._items.get(key)

    def set(self, key: str, value: str) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
