"""The prefix-cache engine stand-in (tests/support/prefix_engine.py), as a process: a prompt it has seen
is served from its cache (the answer's `cached_tokens`, as OpenAI's usage reports it) and its vLLM-named
metrics say so. Its prefill sleeps in proportion to the uncached tokens (a fresh 4 KiB prompt about 0.5 s,
a cached one 5 ms); what that does to the first token is bench.epp_picking's to measure, not a test's:
asserted here, a wall-clock ratio failed on a loaded machine."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import httpx
import pytest

from gateway.epp.readings import parse
from graystack.local.processes import ManagedProcess, free_port, start_process
from tests.support.prefix_engine import Pace, engine_argv

HOST = "127.0.9.7"
PACE = Pace(prefill_base=0.005, prefill_per_token=0.0005, decode_per_token=0.001)
PROMPT = "the conversation so far " * 170  # 4080 bytes: about 1020 tokens


@pytest.fixture
def engine(tmp_path) -> Iterator[str]:
    port = free_port()
    process: ManagedProcess = start_process(
        "prefix-engine", [sys.executable, *engine_argv("pod-a", HOST, port, PACE)], tmp_path
    )
    url = f"http://{HOST}:{port}"
    try:
        process.wait_healthy(lambda: httpx.get(f"{url}/health").status_code == 200, 30, "the engine")
        yield url
    finally:
        process.stop()


def first_token(url: str, content: str) -> tuple[int, str]:
    """The prompt tokens the answer's usage says were cached, and the chunks with content."""
    body = {"model": "m", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": content}]}
    cached, text = None, []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: {") and '"content"' in line:
                text.append(line)
            if line.startswith("data: {") and '"usage"' in line:
                cached = json.loads(line[6:])["usage"]["prompt_tokens_details"]["cached_tokens"]
            if line == "data: [DONE]":
                break
        else:
            pytest.fail("the stream ended without data: [DONE]")
    assert cached is not None, "no usage in the stream"
    return cached, "".join(text)


def counters(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:")
    }


def test_a_repeated_prompt_is_served_from_the_cache_and_says_so(engine):
    fresh, _ = first_token(engine, PROMPT)
    after_fresh = counters(engine)
    repeated, answer = first_token(engine, PROMPT)
    after_repeat = counters(engine)

    assert answer.count('"content"') == 3
    assert fresh == 0
    assert repeated > 0.95 * len(PROMPT) / 4  # the prompt, 4 bytes a token, but for its last partial block
    assert after_fresh["vllm:prefix_cache_hits_total"] == 0
    queried = after_repeat["vllm:prefix_cache_queries_total"] - after_fresh["vllm:prefix_cache_queries_total"]
    hits = after_repeat["vllm:prefix_cache_hits_total"]
    assert queried == after_fresh["vllm:prefix_cache_queries_total"] > 1000
    assert 0.95 < hits / queried <= 1  # all but the last, partial block
    assert after_repeat["vllm:num_requests_running"] == after_repeat["vllm:num_requests_waiting"] == 0
    assert parse(httpx.get(f"{engine}/metrics").text).queue == 0  # the picker reads it as vLLM's


def test_the_cache_is_reset_and_bad_input_is_refused_without_harm(engine):
    first_token(engine, PROMPT)
    assert httpx.post(f"{engine}/reset_prefix_cache").status_code == 200
    before = counters(engine)["vllm:prefix_cache_hits_total"]
    first_token(engine, PROMPT)
    assert counters(engine)["vllm:prefix_cache_hits_total"] == before

    assert httpx.post(f"{engine}/v1/chat/completions", content=b"not json").status_code == 400
    assert httpx.post(f"{engine}/v1/chat/completions", json={"model": "m"}).status_code == 400
    assert first_token(engine, "still answering")[1]
