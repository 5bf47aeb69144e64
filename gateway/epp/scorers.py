"""How a variant's pods are ranked (pure): each scorer gives every candidate a score in [0, 1], higher
better; a pod's total is the weighted sum (the spec's `endpoint_picker.scorers`), the highest first, ties
in turn. After llm-d's scorers (queue depth, KV-cache use, active requests, session affinity):
  - `in_flight`: the requests the picker has in flight on the pod, least first: what exists now, known
    for every pod;
  - `queue`: the requests waiting in the server's own queue, least first;
  - `kv_cache`: 1 - the fraction of the server's KV cache in use;
  - `session`: 1 for the pod that last served the request's cohort key (its conversation's KV cache is
    likely still there), 0 for the others;
  - `prefix`: the share of the request's leading prompt blocks the pod was last sent, contiguously from
    the first (gateway/epp/prefix.py): its prefix cache, guessed without a cohort key;
  - `lora`: llm-d's LoRA affinity for the request's `model`: 1 where the adapter runs, 0.8 where the pod
    has room to load it, 0.6 where it waits to be loaded there, 0 where the pod is full;
  - `prefill`: the prompt bytes the pod would prefill before the request's first token, fewest first:
    those of the requests the picker sent it that it has not begun to answer, plus the request's own,
    each less what the pod's prefix cache likely holds (gateway/epp/picker.py). A server prefills one
    prompt at a time, so this is the wait for a first token, which no server exports.
A pod with no fresh reading of its metrics is scored on `queue`, `kv_cache` and `lora` as `in_flight`
scores it: what the picker counts itself stands in for what the server would have said. `prefix`,
`lora` and `prefill` read the request's body (Signals.prefix, Signals.adapter, Signals.prefill); a
request without one (none, unread) scores alike on every pod on the first two, so they leave its pick to
the others, and on `prefill` by what waits on each pod alone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.epp.readings import Reading
from gateway.spec.endpoint_picker import SCORERS


@dataclass(frozen=True)
class Signals:
    """What a pick knows: its own counts, the fresh readings, and the cohort's last pod."""

    in_flight: Mapping[str, int]
    readings: Mapping[str, Reading]
    last_served: str | None = None
    prefix: Mapping[str, float] = field(default_factory=dict)  # each pod's share of the prompt's blocks
    adapter: str | None = None  # the model the request asks its server for (its body's, or rewritten)
    prefill: Mapping[str, int] = field(default_factory=dict)  # prompt bytes before this one's first token


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


def prefix(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    return {endpoint: signals.prefix.get(endpoint, 0.0) for endpoint in endpoints}


def lora(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    """Running 1, room to load it 0.8, waiting 0.6, full 0 (llm-d's `lora-affinity-scorer`)."""
    if signals.adapter is None:
        return dict.fromkeys(endpoints, 1.0)
    scores = in_flight(endpoints, signals)
    for endpoint in endpoints:
        reading = signals.readings.get(endpoint)
        adapters = reading.adapters if reading is not None else None
        if adapters is None:
            continue
        if signals.adapter in adapters.running:
            scores[endpoint] = 1.0
        elif len(adapters.running) + len(adapters.waiting) < adapters.most:
            scores[endpoint] = 0.8
        elif signals.adapter in adapters.waiting:
            scores[endpoint] = 0.6
        else:
            scores[endpoint] = 0.0
    return scores


def prefill(endpoints: Sequence[str], signals: Signals) -> dict[str, float]:
    return fewest({endpoint: float(signals.prefill.get(endpoint, 0)) for endpoint in endpoints})


TABLE: dict[str, Scorer] = {
    "in_flight": in_flight,
    "queue": queue,
    "kv_cache": kv_cache,
    "session": session,
    "prefix": prefix,
    "lora": lora,
    "prefill": prefill,
}
BODY = frozenset({"prefix", "lora", "prefill"})  # the scorers that read the request's body
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
