"""Started streams send keep-alives while they wait for a token, and the official SDKs still parse them.

A token is held back by the fault injector's `inter_token_latency_ms`, which is much longer than the
server's keep-alive interval, so pings must come between tokens (the ordering of asyncio's timers
decides it, not the machine's speed).
"""

from __future__ import annotations

import anthropic
import httpx
import httpx2
import openai
import pytest

from inference.server.app import ServerOptions
from tests.support.inference import running_app, tiny_model

SLOW = ServerOptions(enable_fault_injection=True, keepalive=0.005)
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("weights"), "zero-layer")


async def slow_tokens(client: httpx.AsyncClient) -> None:
    response = await client.post("/admin/faults", json={"inter_token_latency_ms": 40})
    assert response.status_code == 200


async def test_a_messages_stream_pings_between_slow_tokens_and_the_anthropic_sdk_reads_it(loaded):
    async with running_app(loaded, SLOW) as (app, client):
        await slow_tokens(client)
        raw = await client.post(
            "/v1/messages",
            json={"model": "m", "max_tokens": 3, "temperature": 0, "stream": True, "messages": USER},
        )
        # This anthropic SDK speaks httpx2, whose ASGI transport reaches the same app.
        transport = httpx2.ASGITransport(app=app, client=("127.0.0.1", 50000))
        sdk = anthropic.AsyncAnthropic(
            base_url="http://model",
            api_key="unused",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport, base_url="http://model"),
        )
        greedy = {"temperature": 0}  # through extra_body: this SDK version no longer has the parameter
        async with sdk.messages.stream(model="m", max_tokens=3, messages=USER, extra_body=greedy) as stream:
            text = await stream.get_final_text()
            final = await stream.get_final_message()
    pings = raw.text.count('event: ping\ndata: {"type":"ping"}\n\n')
    assert pings >= 2  # one at least in each gap before the second and third token
    assert raw.text.rstrip().endswith('event: message_stop\ndata: {"type":"message_stop"}')
    assert final.usage.output_tokens >= 1
    assert text == final.content[0].text


async def test_an_openai_stream_sends_comment_pings_and_the_openai_sdk_ignores_them(loaded):
    async with running_app(loaded, SLOW) as (_, client):
        await slow_tokens(client)
        request = {"model": "m", "max_tokens": 3, "temperature": 0, "messages": USER}
        raw = await client.post("/v1/chat/completions", json={**request, "stream": True})
        whole = (await client.post("/v1/chat/completions", json=request)).json()
        sdk = openai.AsyncOpenAI(
            base_url="http://model/v1", api_key="unused", max_retries=0, http_client=client
        )
        stream = await sdk.chat.completions.create(**request, stream=True)
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert raw.text.count(": ping\n\n") >= 2
    assert raw.text.rstrip().endswith("data: [DONE]")
    assert "".join(parts) == whole["choices"][0]["message"]["content"]


async def test_a_stream_whose_tokens_come_at_once_sends_no_ping(loaded):
    async with running_app(loaded, ServerOptions(keepalive=30.0)) as (_, client):
        raw = await client.post(
            "/v1/messages",
            json={"model": "m", "max_tokens": 3, "temperature": 0, "stream": True, "messages": USER},
        )
    assert raw.status_code == 200
    assert "ping" not in raw.text
