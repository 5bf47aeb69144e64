"""The locustfile's conversation user as an asyncio load (loadtests/conversation.py's Conversation: one user
id in `x-user-id`, each turn carrying the whole conversation so far and a new message of the default
prompt-length mix, a think time between turns), sent as streamed OpenAI chat completions. Open loop: new
conversations at a fixed rate, whatever the answers' pace; closed loop: a fixed number of users, each
starting a new conversation when one ends. Each turn is timed (first token: the first chunk with content)
and where it came from is kept: its pod (POD_HEADER, where the server sends it) and the prompt tokens the
server says it had cached (OpenAI's `usage.prompt_tokens_details.cached_tokens`, or llama.cpp's
`timings.cache_n`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from graystack.local.standin import POD_HEADER
from loadtests import config
from loadtests.conversation import Conversation, Reached, Stickiness

PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Shape:
    """What each conversation is made of (the locustfile's defaults unless told)."""

    model: str
    turns: int = config.DEFAULT_CONVERSATION_TURNS
    max_tokens: int = config.DEFAULT_MAX_TOKENS
    prompt_lengths: str = config.DEFAULT_PROMPT_LENGTHS
    max_bytes: int = config.DEFAULT_CONVERSATION_BYTES
    think: tuple[float, float] = config.parse_think_time(config.DEFAULT_THINK_TIME)


@dataclass(frozen=True)
class Turn:
    """One request: when it was sent and ended (perf_counter), its first token's delay, and how it went."""

    sent: float
    ended: float
    ttft: float | None
    error: str | None
    pod: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    same_pod: bool | None = None  # a later turn's: whether the turn before went to the same pod


@dataclass
class Record:
    """Every turn sent, the stickiness of conversations to their pod, and the conversations that ended."""

    turns: list[Turn] = field(default_factory=list)
    stickiness: Stickiness = field(default_factory=Stickiness)
    conversation_turns: list[int] = field(default_factory=list)


async def chat(
    client: httpx.AsyncClient, shape: Shape, messages: list[dict[str, str]], user: str
) -> tuple[Turn, str]:
    """One streamed turn, read to `data: [DONE]`; the Turn and the answer's text."""
    body = {
        "model": shape.model,
        "max_tokens": shape.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_prompt": True,  # llama.cpp's prompt cache (on by default in recent builds)
        "ignore_eos": True,  # llama.cpp's and vLLM's: every answer max_tokens long, as the stand-in's are
        "messages": messages,
    }
    sent, first, text, pod, usage = time.perf_counter(), None, [], None, (0, 0)
    error: str | None = "the stream ended without data: [DONE]"
    try:
        async with client.stream("POST", PATH, json=body, headers={"x-user-id": user}) as answer:
            pod = answer.headers.get(POD_HEADER)
            if answer.status_code != 200:
                await answer.aread()
                raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:120]}")
            async for line in answer.aiter_lines():
                if line == "data: [DONE]":
                    error = None
                    break
                if not line.startswith("data: "):
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    if content := (choice.get("delta") or {}).get("content"):
                        first = first or time.perf_counter()
                        text.append(content)
                usage = _cached(chunk) or usage
    except (httpx.HTTPError, RuntimeError, ValueError) as failure:
        error = f"{type(failure).__name__}: {failure}"
    ended = time.perf_counter()
    ttft = None if first is None else first - sent
    return Turn(sent, ended, ttft, error, pod, *usage), "".join(text)


def _cached(chunk: dict[str, Any]) -> tuple[int, int] | None:
    """(prompt tokens, cached prompt tokens) where the chunk says them."""
    usage, timings = chunk.get("usage"), chunk.get("timings")
    if usage and "prompt_tokens" in usage:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            return usage["prompt_tokens"], cached
    if timings and "prompt_n" in timings:
        return timings["prompt_n"] + timings.get("cache_n", 0), timings.get("cache_n", 0)
    return None


async def conversation(
    client: httpx.AsyncClient, shape: Shape, rng: random.Random, record: Record, until: float
) -> None:
    """One user's conversation, to its last turn, its first failed turn, or `until` (no turn starts after)."""
    user = f"user-{uuid.UUID(int=rng.getrandbits(128)).hex[:12]}"
    talk = Conversation(
        user, shape.turns, config.parse_prompt_lengths(shape.prompt_lengths), rng, shape.max_bytes
    )
    turns = 0
    while not talk.done and time.perf_counter() < until:
        asked = talk.ask()
        turn, text = await chat(client, shape, asked, user)
        if talk.last is not None and talk.last.pod is not None and turn.pod is not None:
            turn = dataclasses.replace(turn, same_pod=turn.pod == talk.last.pod)
        record.turns.append(turn)
        turns += 1
        if turn.error is not None or not text:
            return
        talk.answered(asked, text, Reached("pool", turn.pod), record.stickiness)
        if not talk.done:
            await asyncio.sleep(rng.uniform(*shape.think))
    if talk.done:
        record.conversation_turns.append(turns)


async def open_loop(
    client: httpx.AsyncClient, shape: Shape, rate: float, seconds: float, rng: random.Random
) -> Record:
    """`rate` times `seconds` new conversations, at random times in `seconds` (Poisson arrivals, their count
    fixed so that every run of a level offers the load it is named for); waits for them to end."""
    record, tasks = Record(), []
    start = time.perf_counter()
    until = start + seconds
    for offset in sorted(rng.uniform(0, seconds) for _ in range(round(rate * seconds))):
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        seed = rng.getrandbits(64)
        tasks.append(asyncio.create_task(conversation(client, shape, random.Random(seed), record, until)))
    await asyncio.gather(*tasks)
    return record


async def closed_loop(
    client: httpx.AsyncClient, shape: Shape, users: int, seconds: float, rng: random.Random
) -> Record:
    """`users` users, each beginning a new conversation when its last one ends, for `seconds`."""
    record = Record()
    until = time.perf_counter() + seconds

    async def user(seed: int) -> None:
        own = random.Random(seed)
        while time.perf_counter() < until:
            await conversation(client, shape, own, record, until)

    await asyncio.gather(*(user(rng.getrandbits(64)) for _ in range(users)))
    return record
