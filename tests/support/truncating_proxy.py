"""A proxy in front of a chat server that cuts every answer's text in half: what a misconfigured proxy,
body limit or grammar setting does to a JSON-mode answer (its status stays 200, its JSON stops parsing).
Non-streamed chat completions only. Real HTTP (uvicorn in a thread) on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.threaded_server import served


def truncating_app(upstream: str) -> Starlette:
    async def completions(request: Request) -> Response:
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.post(f"{upstream}/v1/chat/completions", json=await request.json())
        body = answer.json()
        for choice in body.get("choices") or []:
            text = (choice.get("message") or {}).get("content") or ""
            choice["message"]["content"] = text[: len(text) // 2]
        return JSONResponse(body, status_code=answer.status_code)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[Route("/v1/chat/completions", completions, methods=["POST"]), Route("/health", health)]
    )


@contextmanager
def truncating_proxy(upstream: str) -> Iterator[int]:
    """The proxy's port while the block runs."""
    with served(truncating_app(upstream), "the truncating proxy") as port:
        yield port
