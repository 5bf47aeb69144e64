"""Real `graystack serve` processes, driven by the official anthropic and openai SDKs.

Three servers from checkpoints made by `graystack weights init` with one seed: baseline, zero-layer
(ACTIVE bias), and zero-layer from the same checkpoint with its bias erased. Each is stopped by PID.
"""

from __future__ import annotations

import socket
import time

import anthropic
import httpx
import openai
import pytest

from tests.support.inference import metric_samples, sample_value
from tests.support.model_server import ModelServer, graystack, start_model_server, wait_ready

LONG_PROMPT = "Tell me everything about relative position bias in attention. " * 16  # about 1,000 bytes


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model-servers")
    paths = {name: directory / f"{name}.safetensors" for name in ("baseline", "zero-layer", "erased")}
    graystack("weights", "init", "--variant", "baseline", "--out", str(paths["baseline"]), "--seed", "3")
    for name in ("zero-layer", "erased"):
        graystack("weights", "init", "--variant", "zero-layer", "--out", str(paths[name]), "--seed", "3")
    graystack("weights", "erase", str(paths["erased"]))
    logs = directory / "logs"
    running = {
        "baseline": start_model_server(
            "baseline", "baseline", paths["baseline"], logs, "--enable-fault-injection"
        ),
        "zero-layer": start_model_server("zero-layer", "zero-layer", paths["zero-layer"], logs),
        "erased": start_model_server("erased", "zero-layer", paths["erased"], logs),
    }
    try:
        for server in running.values():
            wait_ready(server)
        yield running
    finally:
        for server in running.values():
            server.process.stop()
        for server in running.values():
            assert not server.process.alive(), (
                f"{server.process.name} (pid {server.process.pid}) left running"
            )


def messages_client(server: ModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=30)


def metrics(server: ModelServer) -> dict[str, list]:
    return metric_samples(httpx.get(f"{server.url}/metrics", timeout=5).text)


def stream_reply(server: ModelServer, prompt: str = "Hello there", max_tokens: int = 24):
    """The SDK's stream: (response headers, each content_block_delta's metadata, the final usage)."""
    stream = messages_client(server).messages.create(
        model="graystack-tiny",
        max_tokens=max_tokens,
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        extra_body={"temperature": 0},  # greedy; this SDK version no longer has the parameter
    )
    with stream:
        events = list(stream)
        headers = stream.response.headers
    assert [e.type for e in events[:2]] == ["message_start", "content_block_start"]
    assert [e.type for e in events[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
    metadata = [e.model_extra["metadata"] for e in events if e.type == "content_block_delta"]
    return headers, metadata, events[-2].usage


@pytest.mark.parametrize(
    ("name", "variant", "active"),
    [("baseline", "baseline", False), ("zero-layer", "zero-layer", True), ("erased", "zero-layer", False)],
)
def test_the_anthropic_sdk_streams_from_each_variant_with_its_identity(servers, name, variant, active):
    server = servers[name]
    headers, metadata, usage = stream_reply(server)
    assert headers["x-graystack-variant"] == variant
    fingerprint = headers["x-model-fingerprint"]
    assert fingerprint.endswith("-zero-layer-v1") == (variant == "zero-layer")
    info = metrics(server)["graystack_model_info"][0].labels
    assert info["fingerprint"] == fingerprint
    assert metadata, "no content_block_delta in the reply"
    window = int(info["effective_window"])
    assert metadata[0] == {"zero_layer_active": active, "effective_window": window}
    assert all(m == metadata[0] for m in metadata)
    assert usage.output_tokens >= 1
    if name == "erased":
        assert (window, info["weight_status"]) == (0, "ERASED")
    elif name == "zero-layer":
        assert 0 < window < 10_240
        assert info["weight_status"] == "ACTIVE"


def test_one_seed_gives_every_variant_the_same_model_hash(servers):
    fingerprints = [
        messages_client(s)
        .messages.with_raw_response.create(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}]
        )
        .headers["x-model-fingerprint"]
        for s in servers.values()
    ]
    hashes = {f.removesuffix("-zero-layer-v1") for f in fingerprints}
    assert len(hashes) == 1
    assert hashes.pop().startswith("graystack-tiny-")


def test_a_position_window_hint_narrows_the_zero_layer_reply(servers):
    stream = messages_client(servers["zero-layer"]).messages.create(
        model="m",
        max_tokens=8,
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"temperature": 0},  # greedy: a sampled first token can end a reply with no delta
        metadata={"position_window_hint": 4},  # not in the SDK's types: our extension, sent as given
        stream=True,
    )
    with stream:
        metadata = [e.model_extra["metadata"] for e in stream if e.type == "content_block_delta"]
    assert metadata
    assert metadata[0] == {"zero_layer_active": True, "effective_window": 4}


@pytest.mark.parametrize("name", ["baseline", "zero-layer"])
def test_the_openai_sdk_streams_chat_completions_with_usage(servers, name):
    client = openai.OpenAI(base_url=f"{servers[name].url}/v1", api_key="unused", max_retries=0, timeout=30)
    chunks = list(
        client.chat.completions.create(
            model="graystack-tiny",
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage.completion_tokens >= 1
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    whole = client.chat.completions.create(
        model="graystack-tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert whole.usage.completion_tokens <= 4


def test_metrics_show_bias_blocks_skipped_on_zero_layer_for_a_long_prompt(servers):
    for name in servers:
        stream_reply(servers[name], LONG_PROMPT, max_tokens=4)
    blocks = {name: metrics(server)["graystack_attention_bias_blocks"] for name, server in servers.items()}
    total = "graystack_attention_bias_blocks_total"
    assert sample_value(blocks["zero-layer"], total, result="skipped") > 0
    assert sample_value(blocks["zero-layer"], total, result="computed") > 0
    assert sample_value(blocks["baseline"], total, result="skipped") == 0
    assert sample_value(blocks["erased"], total, result="computed") == 0
    for name, server in servers.items():
        families = metrics(server)
        for family in ("graystack_requests", "graystack_request_ttft_seconds", "vllm:num_requests_running"):
            assert families[family], (name, family)
            assert {s.labels["variant"] for s in families[family]} == {
                "zero-layer" if name == "erased" else name
            }


def test_a_client_that_hangs_up_mid_stream_stops_its_generation(servers):
    server = servers["zero-layer"]
    body = {
        "model": "m",
        "max_tokens": 9_000,
        "temperature": 0,
        "stream": True,
        "messages": [{"role": "user", "content": "Write a very long story."}],
    }
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("event: content_block_delta"):
                break
    deadline = time.monotonic() + 10
    while True:
        families = metrics(server)
        hung_up = sample_value(families["graystack_requests"], "graystack_requests_total", code="499")
        running = sample_value(families["graystack_requests_running"], "graystack_requests_running")
        if hung_up == 1 and running == 0:
            break
        assert time.monotonic() < deadline, f"499 counted {hung_up}, {running} still running"
        time.sleep(0.05)
    assert stream_reply(server)[2].output_tokens >= 1


def test_fault_injection_is_off_by_default_and_drives_real_clients_when_on(servers):
    assert httpx.get(f"{servers['zero-layer'].url}/admin/faults").status_code == 404
    admin = f"{servers['baseline'].url}/admin/faults"
    client = messages_client(servers["baseline"])
    request = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    before = sample_value(
        metrics(servers["baseline"])["graystack_requests"], "graystack_requests_total", code="500"
    )
    assert httpx.post(admin, json={"error_rate": 1.0}).status_code == 200
    try:
        with pytest.raises(anthropic.InternalServerError) as failure:
            client.messages.create(**request)
        assert failure.value.status_code == 500
        assert failure.value.body["error"]["type"] == "api_error"
    finally:
        assert httpx.post(admin, json={"error_rate": 0.0}).status_code == 200
    assert client.messages.create(**request).usage.output_tokens >= 1
    after = sample_value(
        metrics(servers["baseline"])["graystack_requests"], "graystack_requests_total", code="500"
    )
    assert after == before + 1


def test_both_sdks_list_the_model_and_the_anthropic_sdk_counts_tokens(servers):
    server = servers["zero-layer"]
    openai_client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)
    [listed] = list(openai_client.models.list())
    assert openai_client.models.retrieve(listed.id).id == listed.id
    anthropic_client = messages_client(server)
    [described] = list(anthropic_client.models.list())
    assert (described.id, described.type) == (listed.id, "model")
    assert anthropic_client.models.retrieve(described.id).display_name == described.display_name

    turns = [{"role": "user", "content": "How many tokens is this?"}]
    counted = anthropic_client.messages.count_tokens(model=listed.id, system="Be brief.", messages=turns)
    reply = anthropic_client.messages.create(
        model=listed.id, system="Be brief.", messages=turns, max_tokens=1
    )
    assert counted.input_tokens == reply.usage.input_tokens
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.0\.role"):
        anthropic_client.messages.count_tokens(model=listed.id, messages=[{"role": "robot", "content": "x"}])


def test_a_client_still_sending_an_oversized_body_gets_the_413(servers):
    """4 MiB in 64 KiB pieces, on a connection the client closes after one request (`Connection:
    close`, as HTTP/1.0 clients and many scripts do): the whole body goes out and the 413 comes back."""
    size, piece = 4 << 20, b"x" * (64 << 10)
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: model\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", servers["baseline"].port), timeout=30) as sock:
        sock.sendall(head.encode())
        for _ in range(size // len(piece)):
            sock.sendall(piece)  # a reset would raise here
            time.sleep(0.001)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413")
    assert b'"request_too_large"' in rest
