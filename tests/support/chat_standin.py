"""A served OpenAI chat stand-in that speaks as `transformers serve` does (research
real_servers_checkpoints.md §2.1): the model listed by its directory path, a role-only first chunk
(as vLLM sends too), the last chunk carrying `finish_reason` and `usage`, then the connection closes
with no `data: [DONE]` (or with it, when asked), and no fingerprint header. Real HTTP (uvicorn in a
thread) on a free loopback port, so a probe process can be pointed at it like at any server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.threaded_server import served

MODEL_ID = "/models/tiny-llama"


def chat_app(first_token_delay: float, done: bool) -> Starlette:
    """The first generated text comes `first_token_delay` seconds after the role-only chunk."""

    async def models(_: Request) -> Response:
        model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "stand-in"}
        return JSONResponse({"object": "list", "data": [model]})

    async def chunks(request: dict) -> AsyncIterator[str]:
        head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": MODEL_ID}

        def chunk(delta: dict, finish: str | None = None, **extra) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return f"data: {json.dumps({**head, 'choices': [choice], **extra})}\n\n"

        yield chunk({"role": "assistant"})
        await asyncio.sleep(first_token_delay)
        tokens = ["po", "ng"][: request["max_tokens"]]
        for token in tokens:
            yield chunk({"content": token})
        usage = {"prompt_tokens": 3, "completion_tokens": len(tokens), "total_tokens": 3 + len(tokens)}
        yield chunk({}, "length", usage=usage)
        if done:
            yield "data: [DONE]\n\n"

    async def completions(request: Request) -> Response:
        body = await request.json()
        if body.get("model") != MODEL_ID:  # as vLLM: only the served name is known
            error = {"message": f"The model `{body.get('model')}` does not exist.", "type": "NotFoundError"}
            return JSONResponse({"error": error}, status_code=404)
        return StreamingResponse(chunks(body), media_type="text/event-stream")

    routes = [Route("/v1/models", models), Route("/v1/chat/completions", completions, methods=["POST"])]
    return Starlette(routes=routes)


@contextmanager
def served_chat_standin(first_token_delay: float = 0.3, done: bool = False) -> Iterator[str]:
    """The stand-in's URL while the block runs; the server is stopped and joined after it."""
    with served(chat_app(first_token_delay, done), "the chat stand-in") as port:
        yield f"http://127.0.0.1:{port}"
