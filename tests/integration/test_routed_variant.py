"""An answer belongs to the variant Envoy routed it to (issue 34), whatever its server calls itself.

graystack's own server names its model form in `x-graystack-variant` (`baseline`, `zero-layer`), which is
not the variant's name in an A/A run, behind `graystack up --upstream a=URL`, or in a chart whose variants
are `v1` and `v2`. Here two stand-in servers that both call themselves `baseline` serve variants named `a`
and `b`, behind the real Envoy and the gateway's answer log: each answer is measured as the variant Envoy
sent it to, clients see that variant's name, status and a metric tell the mismatch, and a fallback retry's
answer is still told apart by the host that answered.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from functools import partial

import httpx
import pytest
from prometheus_client import REGISTRY

from gateway.admin.protocol import Status
from gateway.families import ANSWERS_MISNAMED
from gateway.metrics.answered import samples
from graystack.console.status_view import render_status
from graystack.local.gateway_stack import answers as ready
from graystack.local.processes import free_port, start_process, wait_until
from tests.support.measured import ROUTED_HEADER, Measured, measured_gateway

pytestmark = pytest.mark.integration

SERVERS_NAME = "baseline"  # what `graystack serve --variant baseline` calls itself, on both variants
BODY = {"model": "m", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
TO_B = {ROUTED_HEADER: "to-b"}


@pytest.fixture
async def same_server_twice(tmp_path, envoy_binary) -> AsyncIterator[tuple[Measured, dict[str, int]]]:
    """Variants `a` (the default split's) and `b` (the `to-b` segment's), each one stand-in naming itself
    `baseline`; a failed attempt on `b` retries on `a`."""
    ports = {"a": free_port(), "b": free_port()}
    servers = [
        start_process(
            variant,
            [sys.executable, "-m", "graystack.local.standin", "--name", SERVERS_NAME, "--port", str(port)],
            tmp_path / "logs",
        )
        for variant, port in ports.items()
    ]
    try:
        for variant, port in ports.items():
            wait_until(partial(ready, port, "/readyz"), 30, f"{variant}'s stand-in")
        retries = {"retries": {"on": "5xx", "attempts": 1, "fallback": "a"}}
        async with measured_gateway(tmp_path, envoy_binary, ports, {"to-b": "b"}, retries) as measured:
            yield measured, ports
    finally:
        for server in servers:
            server.stop()


async def send(measured: Measured, n: int, headers: dict | None = None) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=measured.url, timeout=10) as client:
        responses = []
        for _ in range(n):
            async with client.stream("POST", "/v1/chat/completions", json=BODY, headers=headers) as response:
                await response.aread()
                responses.append(response)
        return responses


def misnamed_metric(variant: str) -> float:
    return REGISTRY.get_sample_value(ANSWERS_MISNAMED, {"variant": variant, "named": SERVERS_NAME}) or 0.0


async def test_answers_count_as_the_routed_variant_and_status_tells_the_servers_own_name(same_server_twice):
    measured, _ = same_server_twice
    before = {variant: misnamed_metric(variant) for variant in ("a", "b")}
    cursor = measured.gateway.answers.cursor
    to_a, to_b = await send(measured, 6), await send(measured, 4, TO_B)

    for responses, variant in ((to_a, "a"), (to_b, "b")):
        assert {(r.status_code, r.headers["x-graystack-variant"]) for r in responses} == {(200, variant)}
        assert {r.headers["x-graystack-server-variant"] for r in responses} == {SERVERS_NAME}
    answers = await measured.answers(cursor, 10)
    assert sorted((a.variant, a.server, a.named, a.fell_back) for a in answers) == sorted(
        [("a", "a", SERVERS_NAME, False)] * 6 + [("b", "b", SERVERS_NAME, False)] * 4
    )
    # the latency tests get every one of them, as their routed variant's
    measured_ttft = {
        key.variant: len(values) for key, values in samples(answers).items() if key.signal == "ttft"
    }
    assert measured_ttft == {"a": 6, "b": 4}

    async with httpx.AsyncClient(timeout=5) as client:
        url = f"http://127.0.0.1:{measured.gateway.options.admin_port}/v1/status"
        status = Status.model_validate((await client.get(url)).json())
    assert {(m.variant, m.named, m.answers) for m in status.misnamed} == {
        ("a", SERVERS_NAME, 6),
        ("b", SERVERS_NAME, 4),
    }
    assert "4 answers sent to b came from a server that calls itself baseline" in render_status(status)
    assert {v: misnamed_metric(v) - before[v] for v in before} == {"a": 6, "b": 4}


async def test_a_fallback_answer_is_told_apart_by_the_host_that_answered(same_server_twice):
    measured, ports = same_server_twice
    control = {"mode": "fail", "reset": True}
    async with httpx.AsyncClient(timeout=5) as client:
        (await client.post(f"http://127.0.0.1:{ports['b']}/_control", json=control)).raise_for_status()
    cursor = measured.gateway.answers.cursor
    responses = await send(measured, 4, TO_B)

    # b fails every attempt; a answers each after the retry, and the client is told so
    assert {(r.status_code, r.headers["x-graystack-variant"]) for r in responses} == {(200, "a")}
    answers = await measured.answers(cursor, 4)
    assert {(a.variant, a.server, a.fell_back, a.misnamed) for a in answers} == {
        ("b", "a", True, SERVERS_NAME)
    }
    assert samples(answers) == {}  # a fallback's times are not b's, nor a's own traffic
