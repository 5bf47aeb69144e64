"""An inference-engine stand-in, one process per pod, for measuring how Envoy balances streams.

Not a model server: a sleep-paced asyncio engine whose capacity is its own, because on this machine
(2 shared cores) real model servers would compete with each other, Envoy and the client for the same
CPUs, and that contention would hide which pod a policy chose. What it keeps of a real engine:
- prefill takes time in proportion to the prompt's bytes, one prompt at a time (later ones queue);
- decode runs in steps shared by every active stream (continuous batching): one token per stream per
  step, and a step takes longer the more streams are in it; prefills and steps take turns in one loop,
  so a new prompt waits for the step in progress and a long prompt stalls the streams;
- an answer stops at a random length up to `max_tokens`, as a model's EOS does (`--full-answers`: at
  `max_tokens`, for streams that must stay open).
The first token comes with the end of prefill. It answers every POST with a Messages SSE stream
(`message_start` at once, then a `content_block_delta` per token) carrying `x-graystack-variant` and
`x-standin-pod`, and any other request with 200 (its health checks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from collections import deque
from dataclasses import dataclass

import uvicorn
from starlette.types import Receive, Scope, Send

from graystack.local.standin import read_body

POD_HEADER = "x-standin-pod"


@dataclass(frozen=True)
class Pace:
    """The engine's clock, in seconds."""

    prefill_base: float = 0.010
    prefill_per_kib: float = 0.025
    step_base: float = 0.040
    step_per_stream: float = 0.004

    def prefill(self, prompt_bytes: int) -> float:
        return self.prefill_base + self.prefill_per_kib * prompt_bytes / 1024

    def step(self, streams: int) -> float:
        return self.step_base + self.step_per_stream * streams


class Engine:
    """One loop, as an engine's scheduler: each turn prefills the oldest waiting prompt (if any), then
    runs one decode step for every stream that waits for a token. A new request thus waits for the
    step in progress and the prompts ahead of it, and a pod busy with streams answers first tokens later."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.prompts: deque[tuple[int, asyncio.Future[None]]] = deque()
        self.decoding = 0
        self.step_done: asyncio.Future[None] | None = None
        self.work = asyncio.Event()
        self.loop_task: asyncio.Task[None] | None = None

    def _future(self) -> asyncio.Future[None]:
        if self.loop_task is None:
            self.loop_task = asyncio.create_task(self._turns())
        self.work.set()
        return asyncio.get_running_loop().create_future()

    async def prefill(self, prompt_bytes: int) -> None:
        done = self._future()
        self.prompts.append((prompt_bytes, done))
        await done

    async def next_token(self) -> None:
        """Waits for the end of the next decode step."""
        if self.step_done is None:
            self.step_done = self._future()
        await asyncio.shield(self.step_done)

    async def _turns(self) -> None:
        while True:
            await self.work.wait()
            if self.prompts:
                size, done = self.prompts.popleft()
                if not done.done():  # its client may have gone
                    await asyncio.sleep(self.pace.prefill(size))
                    done.set_result(None)
            if self.step_done is not None:
                step, self.step_done = self.step_done, None
                await asyncio.sleep(self.pace.step(self.decoding))
                step.set_result(None)
            if not self.prompts and self.step_done is None:
                self.work.clear()


def _event(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _prompt_bytes(body: dict) -> int:
    total = 0
    for message in body.get("messages") or []:
        content = message.get("content", "") if isinstance(message, dict) else ""
        total += len(content.encode()) if isinstance(content, str) else len(json.dumps(content))
    return total


class EnginePod:
    def __init__(self, name: str, variant: str, pace: Pace, seed: int, full_answers: bool) -> None:
        self.name = name
        self.variant = variant
        self.engine = Engine(pace)
        self.rng = random.Random(seed)
        self.full_answers = full_answers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["method"] != "POST":
            payload = json.dumps({"status": "ok", "pod": self.name}).encode()
            await send(
                {"type": "http.response.start", "status": 200, "headers": self._headers(b"application/json")}
            )
            await send({"type": "http.response.body", "body": payload})
            return
        request = json.loads(body or b"{}")
        await self._stream(send, _prompt_bytes(request), int(request.get("max_tokens", 1)))

    def _headers(self, content_type: bytes) -> list[tuple[bytes, bytes]]:
        return [
            (b"content-type", content_type),
            (b"x-graystack-variant", self.variant.encode()),
            (POD_HEADER.encode(), self.name.encode()),
        ]

    async def _stream(self, send: Send, prompt_bytes: int, max_tokens: int) -> None:
        length = max_tokens if self.full_answers else self.rng.randint(1, max(1, max_tokens))
        await send(
            {"type": "http.response.start", "status": 200, "headers": self._headers(b"text/event-stream")}
        )

        async def emit(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        await emit(_event("message_start", {"message": {"role": "assistant", "content": []}}))
        await self.engine.prefill(prompt_bytes)
        await emit(_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}))
        delta = {"index": 0, "delta": {"type": "text_delta", "text": "x"}}
        await emit(_event("content_block_delta", delta))
        self.engine.decoding += 1
        try:
            for _ in range(length - 1):
                await self.engine.next_token()
                await emit(_event("content_block_delta", delta))
        finally:
            self.engine.decoding -= 1
        await emit(_event("content_block_stop", {"index": 0}))
        await emit(
            _event(
                "message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": length}}
            )
        )
        await send({"type": "http.response.body", "body": _event("message_stop", {})})


def engine_argv(name: str, variant: str, port: int, pace: Pace, seed: int, full_answers: bool) -> list[str]:
    """This module as a process, as the stacks start it."""
    argv = ["-m", "tests.support.engine_standin", "--name", name, "--variant", variant, "--port", str(port)]
    argv += ["--seed", str(seed), "--prefill-base", str(pace.prefill_base)]
    argv += ["--prefill-per-kib", str(pace.prefill_per_kib), "--step-base", str(pace.step_base)]
    argv += ["--step-per-stream", str(pace.step_per_stream)]
    return argv + (["--full-answers"] if full_answers else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefill-base", type=float, default=Pace.prefill_base)
    parser.add_argument("--prefill-per-kib", type=float, default=Pace.prefill_per_kib)
    parser.add_argument("--step-base", type=float, default=Pace.step_base)
    parser.add_argument("--step-per-stream", type=float, default=Pace.step_per_stream)
    parser.add_argument("--full-answers", action="store_true")
    args = parser.parse_args()
    pace = Pace(args.prefill_base, args.prefill_per_kib, args.step_base, args.step_per_stream)
    app = EnginePod(args.name, args.variant, pace, args.seed, args.full_answers)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
