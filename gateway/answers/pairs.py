"""Shadow copies paired with their originals: the candidate's answer to a mirrored copy and the baseline's
to the same request, which the comparators judge side by side (issue 28). Pure, bounded, in memory.

    pairs.add(answer, now)        a captured answer (others are not taken); a pair completes when both
                                  halves of one request id are in
    batch = pairs.since(cursor)   completed pairs after `cursor`, oldest first; batch.cursor for next time

A half waits at most `ttl` seconds for its other half (a copy Envoy did not log, an original whose copy was
not mirrored): then it is dropped, counted `expired`. Waiting halves hold at most `budget` bytes of text
(the oldest are dropped first, counted `evicted`), and completed pairs at most `capacity` pairs (the
oldest go first), so answer text never grows past a bound in the gateway, whoever stops reading.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from gateway.answers.answer import Answer

TTL_S = 120.0  # a mirrored copy's answer can end long after its original's: a stream of minutes
BUDGET = 64 * 1024 * 1024  # bytes of text waiting for its other half
CAPACITY = 10_000  # completed pairs kept for readers


@dataclass(frozen=True)
class Pair:
    """One request's two answers: `original` the client's (the baseline's), `shadow` the mirrored copy's."""

    original: Answer
    shadow: Answer


@dataclass(frozen=True)
class PairBatch:
    pairs: tuple[Pair, ...]
    cursor: int
    missed: int = 0


@dataclass
class PairCounts:
    paired: int = 0
    expired: int = 0  # a half whose other half never came within the TTL
    evicted: int = 0  # a waiting half dropped for the byte budget, or a pair for the capacity


def _size(answer: Answer) -> int:
    return len(answer.text or "") + len(answer.calls or "") + 200  # the record's own fields, roughly


@dataclass
class PairStore:
    ttl: float = TTL_S
    budget: int = BUDGET
    capacity: int = CAPACITY
    counts: PairCounts = field(default_factory=PairCounts)
    _waiting: OrderedDict[tuple[str, bool], tuple[Answer, float]] = field(default_factory=OrderedDict)
    _bytes: int = 0
    _pairs: deque[Pair] = field(default_factory=deque)
    _first: int = 0

    def add(self, answer: Answer, now: float) -> Pair | None:
        """Takes a captured answer with a request id; returns the pair it completes, if any."""
        self.expire(now)
        if not answer.captured or answer.request_id is None:
            return None
        other = self._waiting.pop((answer.request_id, not answer.shadow), None)
        if other is None:
            self._wait(answer, now)
            return None
        self._bytes -= _size(other[0])
        pair = (
            Pair(original=other[0], shadow=answer)
            if answer.shadow
            else Pair(original=answer, shadow=other[0])
        )
        self._pairs.append(pair)
        self.counts.paired += 1
        while len(self._pairs) > self.capacity:
            self._pairs.popleft()
            self._first += 1
            self.counts.evicted += 1
        return pair

    def _wait(self, answer: Answer, now: float) -> None:
        key = (answer.request_id or "", answer.shadow)
        if key in self._waiting:  # the same half twice (a retried log): the later one stands
            self._bytes -= _size(self._waiting.pop(key)[0])
        self._waiting[key] = (answer, now)
        self._bytes += _size(answer)
        while self._bytes > self.budget and self._waiting:
            dropped, _ = self._waiting.popitem(last=False)[1]
            self._bytes -= _size(dropped)
            self.counts.evicted += 1

    def expire(self, now: float) -> None:
        """Drops the halves that waited longer than the TTL (they are in arrival order)."""
        while self._waiting:
            key, (answer, since) = next(iter(self._waiting.items()))
            if now - since <= self.ttl:
                return
            del self._waiting[key]
            self._bytes -= _size(answer)
            self.counts.expired += 1

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def waiting_bytes(self) -> int:
        return self._bytes

    @property
    def cursor(self) -> int:
        return self._first + len(self._pairs)

    def since(self, cursor: int = 0) -> PairBatch:
        start = max(cursor, self._first)
        taken = tuple(self._pairs[i - self._first] for i in range(start, self.cursor))
        return PairBatch(pairs=taken, cursor=self.cursor, missed=start - cursor if cursor < start else 0)
