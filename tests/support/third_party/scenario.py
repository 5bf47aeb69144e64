"""The routing scenario every third-party server goes through behind Envoy (tests/integration/
test_third_party_servers.py on every CI run, test_vllm_server.py with `make test-vllm`), as checks on a
running ThirdPartyStack. Which server answered is told by its own answer (ThirdPartyStack.server_of).

Splits are judged as in test_routing: a binomial test at the 1 % level, drawn twice before failing.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
from scipy.stats import binomtest

from tests.support.stacks import envoy_stats
from tests.support.third_party.models import MODEL_NAME
from tests.support.third_party.servers import chat_body
from tests.support.third_party.stack import HEADER, ThirdPartyStack


def check_header_routing(stack: ThirdPartyStack) -> None:
    """`X-Client-Type: <variant>` reaches that variant's server, every time."""
    for name in stack.servers:
        assert stack.served_by(20, {HEADER: name}) == {name: 20}


def check_health_checked(stack: ThirdPartyStack) -> None:
    """Envoy health-checks each server on its own `/health` (the spec's `health_check.path`), and
    each passes: a healthy member, successes, no failure."""
    stats = envoy_stats(stack)
    for name in stack.servers:
        assert stats[f"cluster.{name}.membership_healthy"] == 1, name
        assert stats[f"cluster.{name}.health_check.success"] > 0, name
        assert stats[f"cluster.{name}.health_check.failure"] == 0, name


def check_even_split(stack: ThirdPartyStack, first: str, second: str) -> None:
    """A 50/50 default split between two servers is one, by their answers."""
    stack.set_weights({first: 50, second: 50})
    tests = []
    for _ in range(2):
        counts = stack.served_by(200)
        tests.append((counts, binomtest(counts[second], 200, 0.5).pvalue))
        if tests[-1][1] > 0.01:
            return
    raise AssertionError(f"not a 50/50 split: {tests}")


def check_flip(stack: ThirdPartyStack, current: str, other: str) -> None:
    """A flip to 100 % `other` moves all default traffic there, and one back returns it; header
    segments keep their own server throughout."""
    stack.set_weights({other: 100})
    assert stack.served_by(30) == {other: 30}
    assert stack.served_by(5, {HEADER: current}) == {current: 5}
    stack.set_weights({current: 100})
    assert stack.served_by(30) == {current: 30}


def sse_events(client: httpx.Client, url: str, headers: dict | None = None) -> list[str]:
    """The `data:` payloads of a streamed greedy chat completion, with what differs between two
    identical requests (ids, timestamps, llama.cpp's timings) taken out."""
    events = []
    with client.stream("POST", url, json=chat_body(max_tokens=8, stream=True), headers=headers) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data != "[DONE]":
                chunk = json.loads(data)
                for varying in ("id", "created", "timings"):
                    chunk.pop(varying, None)
                data = json.dumps(chunk, sort_keys=True)
            events.append(data)
    return events


def check_stream_relayed_intact(stack: ThirdPartyStack, name: str) -> None:
    """Through Envoy a stream arrives event for event as the server sends it, whether it ends with
    `[DONE]` (llama.cpp, vLLM) or just closes after the chunk with `finish_reason` (transformers)."""
    server = stack.servers[name]
    with httpx.Client(timeout=30) as client:
        direct = sse_events(client, f"{server.url}/v1/chat/completions")
        relayed = sse_events(client, f"{stack.url}/v1/chat/completions", {HEADER: name})
    assert relayed == direct
    assert '"finish_reason": "length"' in relayed[-2 if relayed[-1] == "[DONE]" else -1]


def check_openai_sdk_streams(stack: ThirdPartyStack, name: str) -> None:
    """The official openai SDK streams the whole greedy answer, as the server would answer it unstreamed."""
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(**chat_body(max_tokens=8), extra_headers={HEADER: name})
    stream = client.chat.completions.create(
        **chat_body(max_tokens=8, stream=True), extra_headers={HEADER: name}
    )
    chunks = [chunk for chunk in stream if chunk.choices]
    assert {chunk.model for chunk in chunks} == {stack.servers[name].identity[0]}
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == answer.choices[0].message.content
    )
    assert chunks[-1].choices[0].finish_reason == "length"


def check_anthropic_sdk_streams(stack: ThirdPartyStack, name: str) -> None:
    """The official anthropic SDK streams the server's `/v1/messages` answer: the same greedy text as
    its chat completion of the same conversation, whole and in order."""
    client = anthropic.Anthropic(base_url=stack.url, api_key="unused", max_retries=0)
    request = {
        "model": MODEL_NAME,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Hi"}],
        "extra_body": {"temperature": 0},  # this SDK's stream() no longer takes it as an argument
    }
    with client.messages.stream(**request, extra_headers={HEADER: name}) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 8
    assert message.content[0].text == text
    direct = httpx.post(f"{stack.servers[name].url}/v1/chat/completions", json=chat_body(8), timeout=30)
    assert text == direct.json()["choices"][0]["message"]["content"]
