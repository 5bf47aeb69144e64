"""A stand-in upstream for gateway tests and the gateway demo: answers with its variant name, and
fails on command.

Real HTTP (uvicorn) on loopback, so Envoy sees a real upstream; it is not the model server
(inference/ is), only the smallest thing whose failures can be scripted:
  ok         200 with `x-graystack-variant`
  fail       503 on every request
  fail-once  503 on the next request, then ok
  stall      waits `stall_seconds` before answering
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

import uvicorn
from starlette.types import Receive, Scope, Send


class StandInUpstream:
    def __init__(self, name: str, mode: str = "ok", stall_seconds: float = 5.0) -> None:
        self.name = name
        self.mode = mode
        self.stall_seconds = stall_seconds
        self.anonymous = False
        self.answers: Counter[int] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
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
            await self._serve(send)

    async def _serve(self, send: Send) -> None:
        if self.mode == "stall":
            await asyncio.sleep(self.stall_seconds)
        if self.mode == "fail":
            await self._answer(send, 503, {"error": "injected failure", "variant": self.name})
        elif self.mode == "fail-once":
            self.mode = "ok"
            await self._answer(send, 503, {"error": "injected failure (once)", "variant": self.name})
        else:
            await self._answer(send, 200, {"variant": self.name})

    async def _answer(self, send: Send, status: int, payload: dict, count: bool = True) -> None:
        if count:
            self.answers[status] += 1
        body = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if not self.anonymous:
            headers.append((b"x-graystack-variant", self.name.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="an address inside a test's network namespace")
    parser.add_argument("--mode", default="ok", choices=["ok", "fail", "fail-once", "stall"])
    args = parser.parse_args()
    app = StandInUpstream(args.name, args.mode)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
