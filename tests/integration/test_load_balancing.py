"""How the real Envoy, programmed by the real gateway, picks one of a variant's pods while one of them
holds long streams: under `least_request` every new request goes to the idle pod; under `round_robin` the
busy pod still takes every other one (and its users wait behind its streams).

The pods are engine stand-ins (tests/support/engine_standin.py). Zero-layer starts with one pod, which
takes the long streams; the second pod joins afterwards, so which pod holds them is not up to the policy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from graystack.local.gateway_stack import GatewayStack
from tests.support.engine_pods import EnginePods
from tests.support.engine_standin import POD_HEADER
from tests.support.stacks import running

PODS = {"baseline-0": "baseline", "busy": "zero-layer", "idle": "zero-layer"}
LONG_STREAMS = 4
NEW_REQUESTS = 20
TO_ZERO_LAYER = {"X-Client-Type": "high_load"}


def body(max_tokens: int) -> dict:
    return {
        "model": "m",
        "max_tokens": max_tokens,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }


@pytest.fixture(params=["least_request", "round_robin"])
def stack(request, tmp_path, envoy_binary) -> Iterator[GatewayStack]:
    pods = EnginePods(PODS, full_answers=True)
    yield from running(GatewayStack(tmp_path, envoy_binary, upstreams=pods))


def set_zero_layer(stack: GatewayStack, pods: list[str], policy: str) -> None:
    spec = stack.spec
    spec["variants"]["zero-layer"] = {
        "endpoints": [f"127.0.0.1:{stack.ports[p]}" for p in pods],
        "load_balancing": policy,
        # no active health check: a pod that joins serves at once (the stand-ins are always up)
        "health_check": None,
    }
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def test_new_requests_avoid_the_pod_busy_with_long_streams(stack, request):
    policy = request.node.callspec.params["stack"]
    set_zero_layer(stack, ["busy"], policy)
    client = httpx.Client(base_url=f"http://127.0.0.1:{stack.ports['listen']}", timeout=30)
    streams = []
    try:
        for _ in range(LONG_STREAMS):  # held open (headers read, body not) until the test ends
            response = client.send(
                client.build_request("POST", "/v1/messages", json=body(5000), headers=TO_ZERO_LAYER),
                stream=True,
            )
            assert response.headers[POD_HEADER] == "busy"
            streams.append(response)
        set_zero_layer(stack, ["busy", "idle"], policy)
        answered: Counter[str] = Counter()
        for _ in range(NEW_REQUESTS):
            answer = client.post("/v1/messages", json=body(2), headers=TO_ZERO_LAYER)
            assert answer.status_code == 200
            assert "message_stop" in answer.text
            answered[answer.headers[POD_HEADER]] += 1
    finally:
        for response in streams:
            response.close()
        client.close()
    if policy == "least_request":
        assert answered == {"idle": NEW_REQUESTS}, f"the busy pod took new requests: {answered}"
    else:
        assert answered["busy"] >= NEW_REQUESTS // 2 - 1, f"round robin should keep alternating: {answered}"
