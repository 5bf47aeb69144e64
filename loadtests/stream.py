"""Reading a Messages SSE stream and timing it. Locust's own response time for a streamed request stops
at the headers, so the numbers users feel are measured here: time to first token (the first
`content_block_delta`), the mean gap between deltas, and the time to `message_stop`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


class StreamError(Exception):
    """The stream ended badly: an `error` event, a broken event, or no `message_stop`."""


@dataclass(frozen=True)
class SseEvent:
    kind: str
    data: dict[str, Any]


def sse_events(lines: Iterable[str]) -> Iterator[SseEvent]:
    """SSE events from the stream's lines (`event:` and `data:` fields, a blank line ends an event)."""
    kind = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield SseEvent(kind, _decode("\n".join(data)))
            kind, data = "message", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        yield SseEvent(kind, _decode("\n".join(data)))


def _decode(payload: str) -> dict[str, Any]:
    try:
        return json.loads(payload)
    except ValueError:
        raise StreamError(f"an event's data is not JSON: {payload[:80]!r}") from None


@dataclass
class StreamTiming:
    """Feed it each event with the clock reading when it arrived; `started` is when the request was sent."""

    started: float
    first_token: float | None = None
    last_token: float | None = None
    deltas: int = 0
    finished: float | None = None

    def record(self, event: SseEvent, now: float) -> None:
        if event.kind == "error":
            error = event.data.get("error", {})
            raise StreamError(f"error event: {error.get('type')}: {error.get('message')}")
        if event.kind == "content_block_delta":
            if self.first_token is None:
                self.first_token = now
            self.last_token = now
            self.deltas += 1
        elif event.kind == "message_stop":
            self.finished = now

    def check_complete(self) -> None:
        if self.finished is None:
            raise StreamError(f"the stream ended without message_stop after {self.deltas} deltas")

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def inter_token(self) -> float | None:
        """The mean gap between consecutive deltas (None with fewer than two)."""
        if self.deltas < 2 or self.first_token is None or self.last_token is None:
            return None
        return (self.last_token - self.first_token) / (self.deltas - 1)

    @property
    def e2e(self) -> float | None:
        return None if self.finished is None else self.finished - self.started
