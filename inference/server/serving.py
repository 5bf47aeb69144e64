"""What both protocol front ends share: the served model, and taking one request from body to events.

Each front end parses its own wire format into a GenerationRequest; everything around that is here,
so both count requests, time tokens, inject faults and stop generating for a vanished client alike.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from weakref import WeakKeyDictionary

from fastapi import APIRouter
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from inference.engine import Chunk, Engine, EngineError, Event, Finished, Generation, GenerationRequest
from inference.server.body import read_json_object
from inference.server.errors import ApiError, from_engine, from_validation
from inference.server.faults import Faults
from inference.server.keepalive import DEFAULT_INTERVAL, Idle, with_keepalive
from inference.server.outputs import Output, OutputLog, ShadowComparator, output_of
from inference.server.telemetry import SEGMENT_HEADER, RequestTimer, ServerMetrics

CLIENT_CLOSED = 499  # nginx's code for a client that went away before its answer was complete


class WireRequest(Protocol):
    """What the shared flow reads of a wire format's parsed request."""

    @property
    def stream(self) -> bool: ...


Wire = TypeVar("Wire", bound=WireRequest)


@dataclass(frozen=True)
class OutputTag:
    """A greedy request whose answer is kept (inference/server/outputs.py), and whether it is a shadow
    copy (Envoy appends `-shadow` to a mirrored request's host name)."""

    request_id: str
    shadow: bool


def output_tag(request: Request, generation_request: GenerationRequest) -> OutputTag | None:
    request_id = request.headers.get("x-request-id")
    if not request_id or generation_request.temperature != 0:
        return None
    return OutputTag(request_id, _host_name(request.headers.get("host", "")).endswith("-shadow"))


def _host_name(host: str) -> str:
    """The Host header without its port: Envoy puts `-shadow` before the port (`10.0.0.1-shadow:8001`)."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


@dataclass
class Serving:
    engine: Engine
    metrics: ServerMetrics
    faults: Faults
    fingerprint: str
    weight_status: str
    keepalive: float = DEFAULT_INTERVAL  # seconds without an event before a started stream sends a ping
    ready: bool = False  # set once a warm-up generation has run
    outputs: OutputLog = field(default_factory=OutputLog)
    comparator: ShadowComparator | None = None  # a candidate comparing its shadow copies' answers
    _tags: WeakKeyDictionary[Generation, OutputTag] = field(default_factory=WeakKeyDictionary)

    @property
    def variant(self) -> str:
        return self.engine.variant

    def bias_metadata(self, generation: Generation) -> dict[str, Any]:
        """The `metadata` each Messages content_block_delta carries (docs/model-server.md).

        `zero_layer_active`: this request gets zero-layer bias work, i.e. a zero-layer server whose
        bias is neither zeroed nor erased, with a window the request's hint did not narrow to 0.
        """
        window = generation.effective_window
        return {"zero_layer_active": self.variant == "zero-layer" and window > 0, "effective_window": window}

    async def accept(
        self, request: Request, parse: Callable[[dict[str, Any]], tuple[Wire, GenerationRequest]]
    ) -> tuple[Wire, Generation, RequestTimer]:
        """Faults, body, validation, admission; an ApiError (already counted) when any of them refuses."""
        arrived = time.monotonic()
        try:
            await self.faults.inject()
            body = await read_json_object(request)
            try:
                parsed, generation_request = parse(body)
            except ValidationError as error:
                raise from_validation(error) from None
            try:
                generation = self.engine.submit(generation_request)
            except EngineError as error:
                raise from_engine(error) from None
        except ApiError as error:
            self.metrics.count(error.status)
            raise
        tag = output_tag(request, generation_request)
        if tag is not None:
            self._tags[generation] = tag
        segment = request.headers.get(SEGMENT_HEADER, "")
        return parsed, generation, self.metrics.timer(arrived, generation.prompt_tokens, segment)

    async def events(self, generation: Generation, timer: RequestTimer) -> AsyncGenerator[Event, None]:
        """The generation's events, timed and counted; cancelled when the consumer stops early."""
        code = CLIENT_CLOSED
        tag = self._tags.pop(generation, None)
        texts: list[str] | None = [] if tag is not None else None  # kept only for a greedy answer's digest
        try:
            async for event in generation.stream():
                if isinstance(event, Chunk):
                    await self.faults.pace()
                    timer.token()
                    if texts is not None:
                        texts.append(event.text)
                else:
                    code = 200
                yield event
        except EngineError as error:
            code = from_engine(error).status
            raise
        finally:
            if code != 200:
                generation.cancel()
            timer.finish(code)
        if tag is not None and texts is not None:  # texts is kept exactly when there is a tag
            self._answered(tag, output_of("".join(texts)))

    def stream_events(
        self, generation: Generation, timer: RequestTimer
    ) -> AsyncGenerator[Event | Idle, None]:
        """`events` for a started stream, with IDLE whenever none came for `keepalive` seconds
        (inference/server/keepalive.py: why a stream's front end then sends a ping). Close it."""
        return with_keepalive(self.events(generation, timer), self.keepalive)

    def _answered(self, tag: OutputTag, output: Output) -> None:
        self.outputs.record(tag.request_id, output)
        if tag.shadow and self.comparator is not None:
            self.comparator.compare_later(tag.request_id, output)

    async def complete(self, generation: Generation, timer: RequestTimer) -> tuple[str, Finished]:
        """The whole reply and how it ended, for a non-streaming answer; raises the EngineError if any."""
        parts = []
        finished = None
        async for event in self.events(generation, timer):
            if isinstance(event, Chunk):
                parts.append(event.text)
            else:
                finished = event
        assert finished is not None, "a generation's events end on Finished or raise"
        return "".join(parts), finished


class ClosingStreamingResponse(StreamingResponse):
    """Closes its body generator however the response ends (a client that hangs up mid-send included),
    so the generation behind it stops at once rather than whenever the generator is collected."""

    body_iterator: AsyncGenerator[str, None]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with aclosing(self.body_iterator):
            await super().__call__(scope, receive, send)


def sse_response(body: AsyncGenerator[str, None]) -> StreamingResponse:
    return ClosingStreamingResponse(
        body, media_type="text/event-stream", headers={"cache-control": "no-cache", "x-accel-buffering": "no"}
    )


def protocol_router(
    path: str,
    parse: Callable[[dict[str, Any]], tuple[Wire, GenerationRequest]],
    stream: Callable[[Serving, Wire, Generation, RequestTimer], AsyncGenerator[str, None]],
    complete: Callable[[Serving, Wire, Generation, RequestTimer], Awaitable[Response]],
    error_response: Callable[[ApiError], Response],
) -> APIRouter:
    """One wire format's POST endpoint: accept (validate and queue), then stream or answer whole.

    `parse`, `stream`, `complete` and `error_response` are the format's own; the flow is shared.
    """
    router = APIRouter()

    @router.post(path, name=path)
    async def handle(request: Request) -> Response:
        serving: Serving = request.app.state.serving
        try:
            parsed, generation, timer = await serving.accept(request, parse)
        except ApiError as error:
            return error_response(error)
        if parsed.stream:
            return sse_response(stream(serving, parsed, generation, timer))
        return await complete(serving, parsed, generation, timer)

    return router
