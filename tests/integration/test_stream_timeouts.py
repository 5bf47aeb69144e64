"""`timeouts.first_byte` bounds the first byte of an attempt and nothing after it, through the real Envoy.

The spec sets `first_byte: 1s`, as `graystack up` does (Envoy's per_try_idle_timeout, which bounds
every gap between bytes). The real zero-layer model server is slowed by its fault injector: tokens 1.5 s apart
(slower than first_byte, but steady) stream to the end, because the server pings while a started
stream waits; a server that sends no first byte for 3 s is cut and the request answered by the
baseline instead.
"""

from __future__ import annotations

import time

import anthropic
import httpx

from tests.support.stacks import envoy_stats

ZERO_LAYER = {"X-Client-Type": "high_load"}  # the default spec's rule: this segment goes to zero-layer


def set_faults(stack, **faults: int) -> None:
    httpx.post(f"{stack.server_url('zero-layer')}/admin/faults", json=faults, timeout=5).raise_for_status()


def idle_timeouts(stack) -> int:
    """Attempts cut by per_try_idle_timeout, counted on the cluster the route names."""
    return envoy_stats(stack).get("cluster.zero-layer-with-fallback.upstream_rq_per_try_idle_timeout", 0)


def first_byte_timeout(stack, seconds: str) -> None:
    spec = stack.spec
    spec["timeouts"] = {"request": "60s", "first_byte": seconds}
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def test_slow_steady_tokens_are_not_cut_and_a_silent_server_is(rollout_stack):
    first_byte_timeout(rollout_stack, "1s")
    set_faults(rollout_stack, inter_token_latency_ms=1500)
    client = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{rollout_stack.ports['listen']}",
        api_key="unused",
        max_retries=0,
        timeout=60,
        default_headers=ZERO_LAYER,
    )
    stream = client.messages.create(
        model="m",
        max_tokens=3,
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        extra_body={"temperature": 0},
    )
    with stream:
        events = list(stream)
        variant = stream.response.headers["x-graystack-variant"]
    assert variant == "zero-layer"
    assert [e.type for e in events[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2].usage.output_tokens >= 2  # at least one 1.5 s gap between tokens
    assert idle_timeouts(rollout_stack) == 0

    set_faults(rollout_stack, inter_token_latency_ms=0, added_latency_ms=3000)
    started = time.monotonic()
    response = rollout_stack.request(ZERO_LAYER)
    assert response.status_code == 200
    assert response.headers["x-graystack-variant"] == "baseline"  # the retry, on the fallback
    assert time.monotonic() - started < 3.0  # cut at first_byte, not answered when the server woke
    assert idle_timeouts(rollout_stack) == 1
