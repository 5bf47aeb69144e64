"""POST /v1/messages: the subset of the Anthropic Messages wire format this server speaks.

Fields: model (any name; echoed back), max_tokens, messages (content a string or text blocks), system,
stream, temperature (0..1, 0 = greedy), stop_sequences, and metadata (user_id, ignored, and
position_window_hint, ours: narrows the zero-layer's bias window for this request). Unknown fields are
refused with a 400 naming the field, as the Anthropic API refuses them, rather than silently ignored:
a client relying on top_p or tools should learn that this server does not honour them.

Streams use the standard SSE events; each content_block_delta carries
`"metadata": {"zero_layer_active": bool, "effective_window": int}`. While a started stream waits for
its next token it sends `event: ping` (inference/server/keepalive.py says why). A failure after the
stream has started arrives as an `error` event.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Literal

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from inference.engine import Chunk, EngineError, Finished, Generation, GenerationRequest
from inference.prompt import chat_prompt
from inference.server.errors import ApiError, error_body, from_engine
from inference.server.keepalive import Idle
from inference.server.serving import Serving, protocol_router
from inference.server.telemetry import RequestTimer

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
MAX_STOP_SEQUENCES = 16


class TextBlock(BaseModel):
    model_config = STRICT

    type: Literal["text"]
    text: str = Field(min_length=1)


class Message(BaseModel):
    model_config = STRICT

    role: Literal["user", "assistant"]
    content: str | list[TextBlock] = Field(min_length=1)


class Metadata(BaseModel):
    model_config = STRICT

    user_id: str | None = None
    position_window_hint: int | None = Field(default=None, ge=0)


class MessagesRequest(BaseModel):
    model_config = STRICT

    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stream: bool = False
    temperature: float = Field(default=1.0, ge=0, le=1)
    stop_sequences: list[str] = Field(default_factory=list, max_length=MAX_STOP_SEQUENCES)
    metadata: Metadata | None = None


def _text(content: str | list[TextBlock]) -> str:
    return content if isinstance(content, str) else "".join(block.text for block in content)


def prompt_of(messages: list[Message], system: str | list[TextBlock] | None) -> list[int]:
    """The token ids the model reads for these turns (what usage.input_tokens counts)."""
    return chat_prompt(
        [(m.role, _text(m.content)) for m in messages], None if system is None else _text(system)
    )


def parse(body: dict[str, Any]) -> tuple[MessagesRequest, GenerationRequest]:
    request = MessagesRequest.model_validate(body)
    return request, GenerationRequest(
        prompt=prompt_of(request.messages, request.system),
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        stop_sequences=tuple(request.stop_sequences),
        window_hint=request.metadata.position_window_hint if request.metadata else None,
    )


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=error.status, headers=error.headers)


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, separators=(',', ':'))}\n\n"


def _message(
    request: MessagesRequest,
    content: list[dict[str, str]],
    usage: dict[str, int],
    finished: Finished | None = None,
) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": finished.stop_reason if finished else None,
        "stop_sequence": finished.stop_sequence if finished else None,
        "usage": usage,
    }


async def _stream(
    serving: Serving, request: MessagesRequest, generation: Generation, timer: RequestTimer
) -> AsyncGenerator[str, None]:
    metadata = serving.bias_metadata(generation)
    usage = {"input_tokens": generation.prompt_tokens, "output_tokens": 0}
    yield _sse("message_start", {"message": _message(request, [], usage)})
    yield _sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    try:
        async with aclosing(serving.stream_events(generation, timer)) as events:
            async for event in events:
                if isinstance(event, Idle):
                    yield _sse("ping", {})
                elif isinstance(event, Chunk) and event.text:
                    delta = {"type": "text_delta", "text": event.text}
                    yield _sse("content_block_delta", {"index": 0, "delta": delta, "metadata": metadata})
                elif isinstance(event, Finished):
                    yield _sse("content_block_stop", {"index": 0})
                    stop = {"stop_reason": event.stop_reason, "stop_sequence": event.stop_sequence}
                    yield _sse(
                        "message_delta", {"delta": stop, "usage": {"output_tokens": event.output_tokens}}
                    )
                    yield _sse("message_stop", {})
    except EngineError as error:
        yield _sse("error", {"error": error_body(from_engine(error))["error"]})


async def _complete(
    serving: Serving, request: MessagesRequest, generation: Generation, timer: RequestTimer
) -> Response:
    try:
        text, finished = await serving.complete(generation, timer)
    except EngineError as error:
        return error_response(from_engine(error))
    usage = {"input_tokens": finished.prompt_tokens, "output_tokens": finished.output_tokens}
    content = [{"type": "text", "text": text}]
    return JSONResponse(_message(request, content, usage, finished))


router = protocol_router("/v1/messages", parse, _stream, _complete, error_response)
