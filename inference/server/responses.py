"""POST /v1/responses, GET and DELETE /v1/responses/{id}: the minimal OpenAI Responses API, stateful.

Fields: model (any name; echoed back), input (a string, or messages whose content is a string or
`input_text`/`output_text` parts), instructions, previous_response_id, max_output_tokens (default 256),
temperature (0..2, 0 = greedy), stream, store (default true), metadata and user (kept, not used).
Unknown fields are refused with a 400 naming the field, as in the chat API.

A stored response keeps its conversation: the turns that led to it and its answer. `previous_response_id`
continues one: its turns, then this request's input (its `instructions` are not carried over, as
OpenAI's are not). The store is this process's memory, bounded (ResponseStore): a response another
server made, one evicted, or one made with `store: false` is unknown here, 404. Behind the gateway a
conversation therefore holds only while every turn reaches the server that made the previous one
(docs/spec-and-routing.md, "The API table").

A stream is OpenAI's typed events (`response.created`, `response.in_progress`,
`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`...,
`response.output_text.done`, `response.content_part.done`, `response.output_item.done`, then
`response.completed`, or `response.incomplete` when max_output_tokens cut it), each `event: <type>` and
`data: {..., "sequence_number": n}`; `: ping` comments while a started stream waits; a failure after
the stream started is `response.failed`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from inference.engine import MAX_TOKENS, Chunk, EngineError, Finished, Generation, GenerationRequest
from inference.prompt import chat_prompt
from inference.server.errors import NOT_FOUND, ApiError, from_engine
from inference.server.keepalive import Idle
from inference.server.openai_chat import DEFAULT_MAX_TOKENS, STRICT, error_body, error_response
from inference.server.serving import Serving, protocol_router
from inference.server.telemetry import RequestTimer

STORED = 1024  # responses kept per server, the least recently used evicted first

Turn = tuple[str, str]  # (role, text), as inference.prompt.chat_prompt reads them


class InputPart(BaseModel):
    model_config = STRICT

    type: Literal["input_text", "output_text"]
    text: str


class InputMessage(BaseModel):
    model_config = STRICT

    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | Annotated[list[InputPart], Field(min_length=1)]


class ResponsesRequest(BaseModel):
    model_config = STRICT

    model: str = Field(min_length=1)
    input: Annotated[str, Field(min_length=1)] | Annotated[list[InputMessage], Field(min_length=1)]
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2)
    stream: bool = False
    store: bool = True
    metadata: dict[str, str] | None = None
    user: str | None = None


@dataclass(frozen=True)
class Stored:
    """A response as GET returns it, and the conversation a follow-up continues."""

    body: dict[str, Any]
    turns: tuple[Turn, ...]


class ResponseStore:
    """The responses this server made, bounded: an OrderedDict in least-recently-used order."""

    def __init__(self, capacity: int = STORED) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[str, Stored] = OrderedDict()

    def get(self, response_id: str) -> Stored | None:
        stored = self._kept.get(response_id)
        if stored is not None:
            self._kept.move_to_end(response_id)
        return stored

    def put(self, response_id: str, stored: Stored) -> None:
        self._kept[response_id] = stored
        self._kept.move_to_end(response_id)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    def delete(self, response_id: str) -> bool:
        return self._kept.pop(response_id, None) is not None


@dataclass(frozen=True)
class Call:
    """One create: the request, the turns its prompt holds, and the id its response will have."""

    request: ResponsesRequest
    turns: tuple[Turn, ...]
    response_id: str
    created_at: int

    @property
    def stream(self) -> bool:
        return self.request.stream


def _not_found(response_id: str, what: str = "Response") -> ApiError:
    return ApiError(404, NOT_FOUND, f"{what} with id {response_id!r} not found on this server")


def _turns(request: ResponsesRequest) -> list[Turn]:
    if isinstance(request.input, str):
        return [("user", request.input)]
    return [
        (
            "system" if m.role == "developer" else m.role,
            m.content if isinstance(m.content, str) else "".join(p.text for p in m.content),
        )
        for m in request.input
    ]


def _body(call: Call, status: str, text: str, finished: Finished | None) -> dict[str, Any]:
    """The response object, in OpenAI's shape (the fields its SDK reads)."""
    request = call.request
    output = [
        {
            "type": "message",
            "id": f"msg_{call.response_id.removeprefix('resp_')}",
            "status": "in_progress" if status == "in_progress" else "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}] if text else [],
        }
    ]
    usage = None
    if finished is not None:
        total = finished.prompt_tokens + finished.output_tokens
        usage = {
            "input_tokens": finished.prompt_tokens,
            "output_tokens": finished.output_tokens,
            "total_tokens": total,
        }
    return {
        "id": call.response_id,
        "object": "response",
        "created_at": call.created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model,
        "output": output if status != "in_progress" else [],
        "parallel_tool_calls": False,
        "previous_response_id": request.previous_response_id,
        "store": request.store,
        "temperature": request.temperature,
        "text": {"format": {"type": "text"}},
        "tool_choice": "none",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": request.metadata or {},
    }


def _status(finished: Finished) -> str:
    return "incomplete" if finished.stop_reason == MAX_TOKENS else "completed"


def responses_routes(store: ResponseStore) -> APIRouter:
    """The create (through the shared flow, inference/server/serving.py), the read and the delete."""

    def parse(body: dict[str, Any]) -> tuple[Call, GenerationRequest]:
        request = ResponsesRequest.model_validate(body)
        earlier: tuple[Turn, ...] = ()
        if request.previous_response_id is not None:
            previous = store.get(request.previous_response_id)
            if previous is None:
                raise _not_found(request.previous_response_id, "Previous response")
            earlier = previous.turns
        turns = (*earlier, *_turns(request))
        call = Call(request, turns, f"resp_{uuid.uuid4().hex}", int(time.time()))
        return call, GenerationRequest(
            prompt=chat_prompt(turns, system=request.instructions),
            max_tokens=request.max_output_tokens or DEFAULT_MAX_TOKENS,
            temperature=request.temperature,
        )

    def keep(call: Call, text: str, finished: Finished) -> dict[str, Any]:
        body = _body(call, _status(finished), text, finished)
        if call.request.store:
            store.put(call.response_id, Stored(body, (*call.turns, ("assistant", text))))
        return body

    async def stream(
        serving: Serving, call: Call, generation: Generation, timer: RequestTimer
    ) -> AsyncGenerator[str, None]:
        sequence = 0

        def event(kind: str, **fields: Any) -> str:
            nonlocal sequence
            sequence += 1
            data = json.dumps({"type": kind, **fields, "sequence_number": sequence}, separators=(",", ":"))
            return f"event: {kind}\ndata: {data}\n\n"

        started = _body(call, "in_progress", "", None)
        item = {"id": f"msg_{call.response_id.removeprefix('resp_')}", "type": "message", "role": "assistant"}
        place = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        yield event("response.created", response=started)
        yield event("response.in_progress", response=started)
        yield event(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "content": []},
        )
        yield event(
            "response.content_part.added",
            **place,
            part={"type": "output_text", "text": "", "annotations": []},
        )
        parts: list[str] = []
        try:
            async with aclosing(serving.stream_events(generation, timer)) as events:
                async for happened in events:
                    if isinstance(happened, Idle):
                        yield ": ping\n\n"
                    elif isinstance(happened, Chunk) and happened.text:
                        parts.append(happened.text)
                        yield event("response.output_text.delta", **place, delta=happened.text)
                    elif isinstance(happened, Finished):
                        text = "".join(parts)
                        part = {"type": "output_text", "text": text, "annotations": []}
                        yield event("response.output_text.done", **place, text=text)
                        yield event("response.content_part.done", **place, part=part)
                        done = {**item, "status": "completed", "content": [part]}
                        yield event("response.output_item.done", output_index=0, item=done)
                        body = keep(call, text, happened)
                        yield event(f"response.{body['status']}", response=body)
        except EngineError as error:
            failed = {**started, "status": "failed", "error": error_body(from_engine(error))["error"]}
            yield event("response.failed", response=failed)

    async def complete(serving: Serving, call: Call, generation: Generation, timer: RequestTimer) -> Response:
        try:
            text, finished = await serving.complete(generation, timer)
        except EngineError as error:
            return error_response(from_engine(error))
        return JSONResponse(keep(call, text, finished))

    router = protocol_router("/v1/responses", parse, stream, complete, error_response)

    @router.get("/v1/responses/{response_id}")
    async def read(response_id: str) -> Response:
        stored = store.get(response_id)
        if stored is None:
            return error_response(_not_found(response_id))
        return JSONResponse(stored.body)

    @router.delete("/v1/responses/{response_id}")
    async def delete(response_id: str) -> Response:
        if not store.delete(response_id):
            return error_response(_not_found(response_id))
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})

    return router
