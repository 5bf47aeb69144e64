"""The gateway's TTFT for graystack's own model server agrees with what the official `openai` and `anthropic`
SDKs see (their first content event, or the whole answer when not streamed), in both wire formats,
streaming and not; tokens come from the server's `usage` where it sends them, else from the events."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from gateway.answers.answer import Answer
from tests.support.measured import Measured, measured_gateway
from tests.support.model_server import start_model_server, variant_weights, wait_ready

pytestmark = pytest.mark.integration

TTFT_BOUND_S = 0.025  # as tests/integration/test_answers.py: the client reads later, by a few ms
TRIES = 3
PROMPT = "The gateway measures every answer"
# Greedy: sampled, the tiny model's first token is sometimes its end (no content event, CI saw it once)


@pytest.fixture
async def measured(tmp_path, envoy_binary):
    weights = variant_weights(tmp_path / "weights", erased=())
    server = start_model_server("baseline", "baseline", weights["baseline"], tmp_path / "logs")
    try:
        wait_ready(server)
        variants = {"baseline": server.port, "candidate": server.port}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}) as running:
            yield running
    finally:
        server.process.stop()


async def openai_stream(client: AsyncOpenAI, usage: bool) -> float | None:
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True} if usage else None,
    )
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    return first


async def openai_whole(client: AsyncOpenAI) -> float:
    started = time.perf_counter()
    await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": PROMPT}], max_tokens=12, temperature=0
    )
    return time.perf_counter() - started


async def anthropic_stream(client: AsyncAnthropic) -> float | None:
    started = time.perf_counter()
    first = None
    async with client.messages.stream(
        model="tiny",
        max_tokens=12,
        messages=[{"role": "user", "content": PROMPT}],
        extra_body={"temperature": 0},  # this SDK has no temperature argument on stream()
    ) as stream:
        async for event in stream:
            if first is None and event.type == "content_block_delta":
                first = time.perf_counter() - started
    return first


async def anthropic_whole(client: AsyncAnthropic) -> float:
    started = time.perf_counter()
    await client.messages.create(
        model="tiny",
        max_tokens=12,
        messages=[{"role": "user", "content": PROMPT}],
        extra_body={"temperature": 0},  # nor on create()
    )
    return time.perf_counter() - started


async def measure(measured: Measured, ask: Callable[[], Awaitable[float | None]]) -> tuple[float, Answer]:
    """The second of two requests (the first warms the server's path), and its answer."""
    cursor = measured.gateway.answers.cursor
    await ask()
    client_ttft = await ask()
    _, answer = await measured.answers(cursor, 2)
    assert client_ttft is not None
    return client_ttft, answer


async def test_the_gateway_agrees_with_the_sdks_on_graystack_servers(measured):
    openai = AsyncOpenAI(base_url=f"{measured.url}/v1", api_key="unused", timeout=30, max_retries=0)
    anthropic = AsyncAnthropic(base_url=measured.url, api_key="unused", timeout=30, max_retries=0)
    cases = {
        "chat, streamed, usage": lambda: openai_stream(openai, usage=True),
        "chat, streamed, no usage": lambda: openai_stream(openai, usage=False),
        "chat, whole": lambda: openai_whole(openai),
        "messages, streamed": lambda: anthropic_stream(anthropic),
        "messages, whole": lambda: anthropic_whole(anthropic),
    }
    try:
        for case, ask in cases.items():
            gaps = []
            for _ in range(TRIES):
                client, answer = await measure(measured, ask)
                assert answer.ttft is not None, case
                assert client - answer.ttft >= -0.001, (case, client, answer)  # the client reads later
                gaps.append(client - answer.ttft)
            # a gateway that took another moment for the first token is off in every try; one scheduling
            # hiccup on a loaded 2-core box (CI once saw 35 ms) is off in one
            assert min(gaps) <= TTFT_BOUND_S, (case, gaps, answer)
            assert (answer.ending, answer.status, answer.variant) == ("complete", 200, "baseline"), case
            assert answer.output_tokens is not None, (case, answer)
            assert 1 <= answer.output_tokens <= 12, (case, answer)
            assert answer.finish in ("stop", "length"), (case, answer)
            assert answer.streamed == ("streamed" in case), case
            assert answer.api == case.partition(",")[0], case
            if answer.streamed and answer.output_tokens >= 2:
                assert answer.itl is not None, case
            assert answer.tokens_counted == (case == "chat, streamed, no usage"), (case, answer)
    finally:
        await openai.close()
        await anthropic.close()
