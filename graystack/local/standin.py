"""A stand-in upstream for gateway tests and the gateway demo: answers with its variant name, and
fails on command.

Real HTTP (uvicorn) on loopback, so Envoy sees a real upstream; it is not the model server
(inference/ is), only the smallest thing whose failures can be scripted:
  ok         200 with `x-graystack-variant`
  fail       503 on every request
  fail-once  503 on the next request, then ok
  stall      waits `stall_seconds` before answering
A request whose JSON body asks `"stream": true` is answered, in `ok` mode, with STREAMED_TOKENS content events
at once in its path's wire format (Messages events on /v1/messages, chat chunks elsewhere), so a benchmark
can put streams through the gateway's answer filter.
Started with `--pod NAME`, every answer also carries `x-graystack-pod: NAME` (POD_HEADER), so a load test
can tell which of a variant's pods answered (graystack's model server names only its variant).
POST /_control {"mode": ..., "stall_seconds": ..., "anonymous": ...} changes the mode (anonymous: answers
carry no `x-graystack-variant`, as a server not graystack's); GET /_stats counts answers.
/readyz and /healthz always answer 200, so only traffic failures are scripted; /health is 404, as on
graystack's own servers (vLLM and llama.cpp answer it), for a health check on a route the server lacks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

STREAMED_TOKENS = 16
POD_HEADER = "x-graystack-pod"


def _asks_to_stream(body: bytes) -> bool:
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return False
    return isinstance(request, dict) and request.get("stream") is True


def _stream_events(messages: bool) -> list[bytes]:
    """A whole answer of STREAMED_TOKENS one-character tokens, as SSE events of either wire format."""

    def sse(data: dict[str, Any], event: str | None = None) -> bytes:
        return ((f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n").encode()

    if messages:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
        usage = {"output_tokens": STREAMED_TOKENS}
        return [
            sse({"type": "message_start", "message": {"usage": {"input_tokens": 1}}}, "message_start"),
            *[sse(delta, "content_block_delta")] * STREAMED_TOKENS,
            sse(
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage},
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]
    chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"}}]}
    last = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    return [*[sse(chunk)] * STREAMED_TOKENS, sse(last), b"data: [DONE]\n\n"]


async def read_body(receive: Receive) -> bytes:
    """An ASGI request's whole body, however many messages it came in."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


class StandInUpstream:
    def __init__(
        self, name: str, mode: str = "ok", stall_seconds: float = 5.0, pod: str | None = None
    ) -> None:
        self.name = name
        self.pod = pod
        self.mode = mode
        self.stall_seconds = stall_seconds
        self.anonymous = False
        self.answers: Counter[int] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        body = await read_body(receive)
        if path in ("/readyz", "/healthz"):
            await self._answer(send, 200, {"status": "ok"}, count=False)
        elif path == "/health":
            await self._answer(send, 404, {"error": "no such route"}, count=False)
        elif path == "/_control":
            change = json.loads(body or b"{}")
            self.mode = change.get("mode", self.mode)
            self.stall_seconds = float(change.get("stall_seconds", self.stall_seconds))
            self.anonymous = bool(change.get("anonymous", self.anonymous))
            if change.get("reset"):
                self.answers.clear()
            await self._answer(send, 200, {"mode": self.mode}, count=False)
        elif path == "/_stats":
            await self._answer(send, 200, {str(k): v for k, v in self.answers.items()}, count=False)
        else:
            await self._serve(send, path, _asks_to_stream(body))

    async def _serve(self, send: Send, path: str, stream: bool) -> None:
        if self.mode == "stall":
            await asyncio.sleep(self.stall_seconds)
        if self.mode == "fail":
            await self._answer(send, 503, {"error": "injected failure", "variant": self.name})
        elif self.mode == "fail-once":
            self.mode = "ok"
            await self._answer(send, 503, {"error": "injected failure (once)", "variant": self.name})
        elif stream:
            await self._stream(send, path)
        else:
            await self._answer(send, 200, {"variant": self.name})

    async def _stream(self, send: Send, path: str) -> None:
        self.answers[200] += 1
        headers = [(b"content-type", b"text/event-stream"), *self._identity()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for event in _stream_events(path.startswith("/v1/messages")):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _answer(self, send: Send, status: int, payload: dict[str, Any], count: bool = True) -> None:
        if count:
            self.answers[status] += 1
        body = json.dumps(payload).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *self._identity(),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _identity(self) -> list[tuple[bytes, bytes]]:
        """The variant's name and, where given, the pod's (none when answering as a server not graystack's)."""
        if self.anonymous:
            return []
        named = [(b"x-graystack-variant", self.name.encode())]
        return [*named, (POD_HEADER.encode(), self.pod.encode())] if self.pod else named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="an address inside a test's network namespace")
    parser.add_argument("--mode", default="ok", choices=["ok", "fail", "fail-once", "stall"])
    parser.add_argument("--pod", help=f"name this pod in every answer's {POD_HEADER} header")
    args = parser.parse_args()
    app = StandInUpstream(args.name, args.mode, pod=args.pod)
    # A stalled answer is given a second on SIGTERM, not waited out: a stack's stop would wait for it
    # until its grace (5 s) ran out and it was killed.
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()
