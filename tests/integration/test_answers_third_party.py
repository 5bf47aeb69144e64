"""The gateway measures servers nobody here wrote as it measures graystack's: llama.cpp and
`transformers serve` (which export no TTFT histogram at all), through the `openai` SDK, streamed and not.
Their TTFT agrees with the SDK's first content chunk; tokens come from their `usage`, else the events."""

from __future__ import annotations

import time

import pytest
from openai import AsyncOpenAI

from tests.support.measured import ROUTED_HEADER, measured_gateway
from tests.support.third_party.models import MODEL_NAME

pytestmark = pytest.mark.integration

TTFT_BOUND_S = 0.025  # as tests/integration/test_answers.py


async def ask(client: AsyncOpenAI, server: str, stream: bool) -> float | None:
    """Seconds to the first content chunk (streamed) or to the whole answer, as the SDK sees them."""
    started = time.perf_counter()
    request = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 8,
        "temperature": 0,
        "extra_headers": {ROUTED_HEADER: server},
    }
    if not stream:
        await client.chat.completions.create(**request)
        return time.perf_counter() - started
    first = None
    async for chunk in await client.chat.completions.create(**request, stream=True):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    return first


async def test_llama_cpp_and_transformers_serve_are_measured_like_graystacks_servers(
    tmp_path, envoy_binary, llama_cpp, transformers_serve
):
    variants = {"llama-cpp": llama_cpp.port, "transformers": transformers_serve.port}
    rules = {name: name for name in variants}
    async with measured_gateway(tmp_path, envoy_binary, variants, rules) as measured:
        client = AsyncOpenAI(base_url=f"{measured.url}/v1", api_key="unused", timeout=60, max_retries=0)
        try:
            for server in variants:
                for stream in (True, False):
                    cursor = measured.gateway.answers.cursor
                    await ask(client, server, stream)  # warms the server's path for this case
                    seen = await ask(client, server, stream)
                    _, answer = await measured.answers(cursor, 2)
                    case = (server, stream, answer)
                    assert seen is not None, case
                    assert answer.ttft is not None, case
                    assert -0.001 <= seen - answer.ttft <= TTFT_BOUND_S, (seen, case)
                    assert (answer.variant, answer.segment, answer.streamed) == (server, server, stream), case
                    assert (answer.ending, answer.failed) == ("complete", False), case
                    assert answer.finish in ("stop", "length"), case
                    assert answer.output_tokens is not None, case
                    assert 1 <= answer.output_tokens <= 8, case
        finally:
            await client.close()
