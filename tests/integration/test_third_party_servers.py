"""Servers nobody here wrote behind the real Envoy, programmed by the real gateway: llama.cpp (the
xllamacpp wheel, on a GGUF) and `transformers serve` (on a safetensors directory), both serving a tiny
Llama made in this session. Which server answered is told by its own answer (model id and
`system_fingerprint`): they send no `x-graystack-variant`, and Envoy adds none.

Splits are judged as in test_routing: a binomial test at the 1 % level, drawn twice before failing.
"""

import json

import anthropic
import httpx
import openai
import pytest
from scipy.stats import binomtest

from tests.support.third_party.models import MODEL_NAME
from tests.support.third_party.servers import chat_body
from tests.support.third_party.stack import HEADER

SERVERS = ("llama-cpp", "transformers")


def test_the_routing_header_sends_each_segment_to_its_own_server(third_party_stack):
    for name in SERVERS:
        assert third_party_stack.served_by(20, {HEADER: name}) == {name: 20}


def test_unmatched_requests_split_by_weight_between_the_servers(third_party_stack):
    third_party_stack.set_weights({"llama-cpp": 50, "transformers": 50})
    tests = []
    for _ in range(2):
        counts = third_party_stack.served_by(200)
        tests.append((counts, binomtest(counts["transformers"], 200, 0.5).pvalue))
        if tests[-1][1] > 0.01:
            return
    raise AssertionError(f"not a 50/50 split: {tests}")


def test_a_flip_moves_all_default_traffic_to_the_other_server(third_party_stack):
    third_party_stack.set_weights({"transformers": 100})
    assert third_party_stack.served_by(30) == {"transformers": 30}
    # A segment's rule is not the default split: it still reaches its own server.
    assert third_party_stack.served_by(5, {HEADER: "llama-cpp"}) == {"llama-cpp": 5}
    third_party_stack.set_weights({"llama-cpp": 100})
    assert third_party_stack.served_by(30) == {"llama-cpp": 30}


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


@pytest.mark.parametrize("name", SERVERS)
def test_a_stream_passes_through_envoy_as_the_server_sent_it(third_party_stack, name):
    """transformers serve ends its streams without `[DONE]` (the connection closes after the chunk
    with `finish_reason`), llama.cpp with it: through Envoy each arrives event for event as sent."""
    server = third_party_stack.servers[name]
    with httpx.Client(timeout=30) as client:
        direct = sse_events(client, f"{server.url}/v1/chat/completions")
        relayed = sse_events(client, f"{third_party_stack.url}/v1/chat/completions", {HEADER: name})
    assert relayed == direct
    assert '"finish_reason": "length"' in relayed[-2 if relayed[-1] == "[DONE]" else -1]


@pytest.mark.parametrize("name", SERVERS)
def test_the_openai_sdk_streams_from_each_server_through_envoy(third_party_stack, name):
    server = third_party_stack.servers[name]
    client = openai.OpenAI(base_url=f"{third_party_stack.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(**chat_body(max_tokens=8), extra_headers={HEADER: name})
    stream = client.chat.completions.create(
        **chat_body(max_tokens=8, stream=True), extra_headers={HEADER: name}
    )
    chunks = list(stream)
    assert {chunk.model for chunk in chunks} == {server.identity[0]}
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == answer.choices[0].message.content
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_the_anthropic_sdk_streams_from_llama_cpp_through_envoy(third_party_stack):
    client = anthropic.Anthropic(base_url=third_party_stack.url, api_key="unused", max_retries=0)
    request = {
        "model": MODEL_NAME,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Hi"}],
        "extra_body": {"temperature": 0},  # this SDK's stream() no longer takes it as an argument
    }
    with client.messages.stream(**request, extra_headers={HEADER: "llama-cpp"}) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 8
    assert message.content[0].text == text
    # The same greedy answer as its chat completion of the same conversation: a whole answer, in order.
    direct = httpx.post(
        f"{third_party_stack.servers['llama-cpp'].url}/v1/chat/completions", json=chat_body(8)
    )
    assert text == direct.json()["choices"][0]["message"]["content"]
