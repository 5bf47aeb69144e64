"""An LLM engine stand-in with a prefix cache, one process per pod, for measuring how a picker's choices
play out where the pods are not interchangeable (bench/epp_picking.py): a pod that holds a conversation's
prefix answers its next turn sooner, a pod with a queue later. Time is simulated (asyncio.sleep), so
several fit on two shared cores and a pick, not the CPU, decides the latency.

The model, after vLLM's automatic prefix caching:
- the prompt is the chat rendered as text (`<|role|>content` per message), BYTES_PER_TOKEN bytes a token,
  cut into blocks of `block_tokens`; each full block is known by a hash chained over the blocks before it,
  so a block matches only under the same prefix;
- a prefix cache of block hashes holds at most `cache_tokens` tokens, the least recently used dropped
  first; a request's cached tokens are its leading blocks found there; its prompt's blocks, and at the end
  the blocks of the prompt with its answer (the next turn's prefix), are put there;
- at most `batch` requests run, the rest wait in order; prefill is one at a time (it is compute-bound:
  a long prompt delays the first token of the prompts behind it) and takes `prefill_base` plus
  `prefill_per_token` for each uncached token; the first token comes with its end; then each further token
  takes `decode_per_token`, whatever the batch (decode is memory-bound);
- an answer is exactly `max_tokens` tokens of BYTES_PER_TOKEN bytes each.
It answers `POST /v1/chat/completions` (OpenAI's format; streamed as SSE chunks ending with `data: [DONE]`,
or whole), `POST /reset_prefix_cache` (as vLLM does), `GET /health`, and `GET /metrics` with vLLM's names:
`vllm:num_requests_waiting` (waiting for a batch slot or for prefill), `vllm:num_requests_running`,
`vllm:kv_cache_usage_perc` (the tokens of the running requests over the cache's capacity, a fraction) and
the counters `vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total`, in prompt tokens.
Answers carry POD_HEADER with the pod's name.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import uvicorn
from starlette.types import Receive, Scope, Send

from graystack.local.standin import POD_HEADER, read_body

BYTES_PER_TOKEN = 4
ANSWER_TOKEN = " tok"  # one answer token: BYTES_PER_TOKEN bytes
MODEL = "prefix-engine"


@dataclass(frozen=True)
class Pace:
    """The engine's clock (seconds) and sizes."""

    prefill_base: float = 0.005
    prefill_per_token: float = 0.001
    decode_per_token: float = 0.02
    block_tokens: int = 16
    cache_tokens: int = 65536
    batch: int = 8

    def prefill(self, uncached_tokens: int) -> float:
        return self.prefill_base + self.prefill_per_token * uncached_tokens


def render(messages: Sequence[object]) -> bytes:
    """The chat as the engine's prompt text: every message's role and content, in order."""
    parts = []
    for message in messages:
        if isinstance(message, dict):
            content = message.get("content", "")
            text = content if isinstance(content, str) else json.dumps(content)
            parts.append(f"<|{message.get('role', 'user')}|>{text}\n")
    return "".join(parts).encode()


def tokens_of(text: bytes) -> int:
    return math.ceil(len(text) / BYTES_PER_TOKEN)


def block_hashes(text: bytes, block_tokens: int) -> list[bytes]:
    """The hashes of the text's full blocks, each chained over those before it."""
    size = block_tokens * BYTES_PER_TOKEN
    hashes, previous = [], b""
    for start in range(0, len(text) - size + 1, size):
        previous = hashlib.blake2b(previous + text[start : start + size], digest_size=16).digest()
        hashes.append(previous)
    return hashes


class PrefixCache:
    """Block hashes, least recently used first, at most `capacity` blocks."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def leading_hits(self, hashes: Sequence[bytes]) -> int:
        """How many of the leading blocks are cached (a prefix stops at its first miss)."""
        count = 0
        for digest in hashes:
            if digest not in self._blocks:
                break
            count += 1
        return count

    def put(self, hashes: Sequence[bytes]) -> None:
        for digest in hashes:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()


class Engine:
    """The scheduler: batch slots, one prefill lane, the prefix cache and the counters /metrics shows."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.cache = PrefixCache(pace.cache_tokens // pace.block_tokens)
        self.slots = asyncio.Semaphore(pace.batch)
        self.lane = asyncio.Lock()
        self.waiting = self.running = self.held_tokens = 0
        self.hit_tokens = self.query_tokens = 0

    @contextlib.asynccontextmanager
    async def admitted(self, prompt: bytes) -> AsyncIterator[int]:
        """Waits for a batch slot and the prefill lane, prefills, and yields the prompt's cached tokens
        with the first token due; the slot is held until the block ends (the answer's decode)."""
        tokens = tokens_of(prompt)
        self.waiting += 1
        begun = False
        try:
            async with self.slots:
                async with self.lane:
                    self.waiting, self.running, begun = self.waiting - 1, self.running + 1, True
                    self.held_tokens += tokens
                    hashes = block_hashes(prompt, self.pace.block_tokens)
                    cached = min(tokens, self.cache.leading_hits(hashes) * self.pace.block_tokens)
                    self.cache.put(hashes)
                    self.hit_tokens += cached
                    self.query_tokens += tokens
                    await asyncio.sleep(self.pace.prefill(tokens - cached))
                yield cached
        finally:
            if begun:
                self.running -= 1
                self.held_tokens -= tokens
            else:
                self.waiting -= 1

    def remember(self, answered: bytes) -> None:
        """The chat with its answer, whose blocks stay cached (the next turn's prefix)."""
        self.cache.put(block_hashes(answered, self.pace.block_tokens))

    def metrics(self) -> str:
        usage = min(1.0, self.held_tokens / self.pace.cache_tokens)
        lines = []
        for name, kind, value in (
            ("vllm:num_requests_waiting", "gauge", self.waiting),
            ("vllm:num_requests_running", "gauge", self.running),
            ("vllm:kv_cache_usage_perc", "gauge", usage),
            ("vllm:prefix_cache_queries_total", "counter", self.query_tokens),
            ("vllm:prefix_cache_hits_total", "counter", self.hit_tokens),
        ):
            family = name.removesuffix("_total")
            lines += [f"# TYPE {family} {kind}", f'{name}{{model_name="{MODEL}"}} {value}']
        return "\n".join(lines) + "\n"


class EnginePod:
    """The HTTP edge (raw ASGI): the routes above, over one Engine."""

    def __init__(self, name: str, pace: Pace) -> None:
        self.name = name
        self.engine = Engine(pace)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        route = (scope["method"], scope["path"])
        if route == ("POST", "/v1/chat/completions"):
            try:
                request = json.loads(body)
                messages = request["messages"]
                max_tokens = max(1, int(request.get("max_tokens") or 16))
                if not isinstance(messages, list):
                    raise TypeError("messages is not a list")
            except (ValueError, KeyError, TypeError) as error:
                await self._answer(
                    send, 400, {"error": {"type": "invalid_request_error", "message": str(error)}}
                )
                return
            await self._chat(send, messages, max_tokens, bool(request.get("stream")))
        elif route == ("GET", "/metrics"):
            await self._answer(send, 200, self.engine.metrics().encode(), b"text/plain; version=0.0.4")
        elif route == ("POST", "/reset_prefix_cache"):
            self.engine.cache.clear()
            await self._answer(send, 200, {"reset": True})
        elif route == ("GET", "/health"):
            await self._answer(send, 200, {"status": "ok", "pod": self.name})
        else:
            await self._answer(send, 404, {"error": {"type": "not_found", "message": f"no route {route}"}})

    def _headers(self, content_type: bytes) -> list[tuple[bytes, bytes]]:
        return [(b"content-type", content_type), (POD_HEADER.encode(), self.name.encode())]

    async def _answer(
        self, send: Send, status: int, body: dict | bytes, content_type: bytes = b"application/json"
    ) -> None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status, "headers": self._headers(content_type)})
        await send({"type": "http.response.body", "body": payload})

    async def _chat(self, send: Send, messages: list, max_tokens: int, stream: bool) -> None:
        prompt = render(messages)
        if stream:
            await send(
                {"type": "http.response.start", "status": 200, "headers": self._headers(b"text/event-stream")}
            )
        async with self.engine.admitted(prompt) as cached:
            for index in range(max_tokens):
                if index:
                    await asyncio.sleep(self.engine.pace.decode_per_token)
                if stream:
                    delta = (
                        {"role": "assistant", "content": ANSWER_TOKEN}
                        if index == 0
                        else {"content": ANSWER_TOKEN}
                    )
                    await send({"type": "http.response.body", "body": _chunk(delta, None), "more_body": True})
        answer = ANSWER_TOKEN * max_tokens
        self.engine.remember(render([*messages, {"role": "assistant", "content": answer}]))
        usage = {
            "prompt_tokens": tokens_of(prompt),
            "completion_tokens": max_tokens,
            "total_tokens": tokens_of(prompt) + max_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        if stream:
            last = _chunk({}, "length", usage) + b"data: [DONE]\n\n"
            await send({"type": "http.response.body", "body": last})
            return
        choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "length"}
        await self._answer(
            send, 200, {"object": "chat.completion", "model": MODEL, "choices": [choice], "usage": usage}
        )


def _chunk(delta: dict, finish: str | None, usage: dict | None = None) -> bytes:
    chunk: dict = {
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n".encode()


def engine_argv(name: str, host: str, port: int, pace: Pace) -> list[str]:
    """This module as a process (after the Python interpreter)."""
    argv = ["-m", "tests.support.prefix_engine", "--name", name, "--host", host, "--port", str(port)]
    for field in dataclasses.fields(pace):
        argv += [f"--{field.name.replace('_', '-')}", str(getattr(pace, field.name))]
    return argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    for field in dataclasses.fields(Pace):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default
        )
    args = parser.parse_args()
    pace = Pace(**{field.name: getattr(args, field.name) for field in dataclasses.fields(Pace)})
    app = EnginePod(args.name, pace)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
