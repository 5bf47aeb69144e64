"""POST /v1/chat/completions: the OpenAI chat format, which load tools and inference routers expect.

Fields: model (any name; echoed back), messages (roles system, developer, user, assistant; content a
string or text parts), max_tokens or max_completion_tokens (default 256), temperature (0..2, 0 =
greedy), stop (a string or a list), seed, stream, stream_options.include_usage, and
position_window_hint (ours, as in the Messages API's metadata; send it through the SDK's extra_body).
Unknown fields are refused with a 400 naming the field, as OpenAI's API refuses them.

Streams are `data: {chunk}` lines, a usage chunk (empty choices) when include_usage is set, then
`data: [DONE]`; while a started stream waits for its next token it sends an SSE comment line
`: ping` (ignored by SSE clients; inference/server/keepalive.py says why); a failure after the
stream has started arrives as `data: {"error": {...}}` and then
`[DONE]`, the convention the official SDK raises on. Errors use OpenAI's shape with the HTTP status
of the Messages endpoint (so 529 when overloaded, which the SDK and Envoy retry as a 5xx).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from inference.engine import MAX_TOKENS, Chunk, EngineError, Finished, Generation, GenerationRequest
from inference.prompt import chat_prompt
from inference.server.errors import API, TOO_LARGE, ApiError, from_engine, invalid
from inference.server.keepalive import Idle
from inference.server.serving import Serving, protocol_router
from inference.server.telemetry import RequestTimer

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
DEFAULT_MAX_TOKENS = 256
MAX_STOP_SEQUENCES = 16
_OPENAI_TYPES = {API: "server_error", TOO_LARGE: "invalid_request_error"}


class TextPart(BaseModel):
    model_config = STRICT

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = STRICT

    role: Literal["system", "developer", "user", "assistant"]
    content: str | Annotated[list[TextPart], Field(min_length=1)]


class StreamOptions(BaseModel):
    model_config = STRICT

    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = STRICT

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)  # OpenAI's is an int64
    stream: bool = False
    stream_options: StreamOptions | None = None
    position_window_hint: int | None = Field(default=None, ge=0)


def _text(content: str | list[TextPart]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def parse(body: dict[str, Any]) -> tuple[ChatRequest, GenerationRequest]:
    request = ChatRequest.model_validate(body)
    stops = [request.stop] if isinstance(request.stop, str) else request.stop or []
    if len(stops) > MAX_STOP_SEQUENCES:
        raise invalid(f"stop: at most {MAX_STOP_SEQUENCES} sequences")
    turns = [("system" if m.role == "developer" else m.role, _text(m.content)) for m in request.messages]
    return request, GenerationRequest(
        prompt=chat_prompt(turns),
        max_tokens=request.max_completion_tokens or request.max_tokens or DEFAULT_MAX_TOKENS,
        temperature=request.temperature,
        stop_sequences=tuple(stops),
        seed=request.seed,
        window_hint=request.position_window_hint,
    )


def error_body(error: ApiError) -> dict[str, Any]:
    kind = _OPENAI_TYPES.get(error.kind, error.kind)
    return {"error": {"message": error.message, "type": kind, "param": None, "code": None}}


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=error.status, headers=error.headers)


def _finish_reason(finished: Finished) -> str:
    return "length" if finished.stop_reason == MAX_TOKENS else "stop"


def _usage(finished: Finished) -> dict[str, Any]:
    return {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.output_tokens,
        "total_tokens": finished.prompt_tokens + finished.output_tokens,
    }


def _data(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


async def _stream(
    serving: Serving, request: ChatRequest, generation: Generation, timer: RequestTimer
) -> AsyncGenerator[str, None]:
    include_usage = request.stream_options is not None and request.stream_options.include_usage
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
        return _data({**body, "usage": None} if include_usage else body)

    yield chunk({"role": "assistant", "content": ""})
    try:
        async with aclosing(serving.stream_events(generation, timer)) as events:
            async for event in events:
                if isinstance(event, Idle):
                    yield ": ping\n\n"
                elif isinstance(event, Chunk) and event.text:
                    yield chunk({"content": event.text})
                elif isinstance(event, Finished):
                    yield chunk({}, _finish_reason(event))
                    if include_usage:
                        yield _data({**head, "choices": [], "usage": _usage(event)})
    except EngineError as error:
        yield _data(error_body(from_engine(error)))
    yield "data: [DONE]\n\n"


async def _complete(
    serving: Serving, request: ChatRequest, generation: Generation, timer: RequestTimer
) -> Response:
    try:
        text, finished = await serving.complete(generation, timer)
    except EngineError as error:
        return error_response(from_engine(error))
    message = {"role": "assistant", "content": text}
    return JSONResponse(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(finished)}],
            "usage": _usage(finished),
        }
    )


router = protocol_router("/v1/chat/completions", parse, _stream, _complete, error_response)
