"""A model server closes a keep-alive connection it has left idle for 5 s (uvicorn's default, graystack's
and vLLM's server; llama.cpp's cpp-httplib too). A request Envoy sends down that connection as the server
closes it fails as a reset: an error the variant never made, counted against it (envoyproxy/envoy#2324).
Envoy drops its pooled connections to the servers after SERVER_IDLE_TIMEOUT_S, before the server does.

The server is a scripted upstream (uvicorn, its default keep-alive) behind a 150 ms delay proxy, which
widens the moment in which Envoy does not yet know the connection is closing, as a network would. Each
request is sent when the previous one's connection has been idle 4.85 s. Without the idle timeout every
second request of this test fails with Envoy's 503 (`upstream_reset_before_response_started`).
"""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest

from gateway.envoy.common import SERVER_IDLE_TIMEOUT_S
from graystack.local.processes import free_port, port_in_use, start_process, wait_until
from tests.integration.test_answers_rollback import CHAT
from tests.support.measured import measured_gateway
from tests.support.scripted_upstream import served_scripted_upstream

pytestmark = pytest.mark.integration

SERVER_KEEP_ALIVE_S = 5.0  # uvicorn's timeout_keep_alive
ONE_WAY_S = 0.15
# The request reaches the server ONE_WAY_S after Envoy sent it; the server's close reaches Envoy ONE_WAY_S
# after it was made: a request sent at the server's close, as Envoy's clock tells it, lands in the middle.
IDLE_S = SERVER_KEEP_ALIVE_S - ONE_WAY_S


async def test_a_request_sent_as_the_server_closes_its_idle_connection_is_answered(tmp_path, envoy_binary):
    assert SERVER_IDLE_TIMEOUT_S < IDLE_S  # what the test relies on: Envoy closes first
    with served_scripted_upstream() as server:
        port = free_port()
        argv = [sys.executable, "-m", "tests.support.delay_proxy", str(port), f"127.0.0.1:{server}"]
        proxy = start_process("delay-proxy", [*argv, str(ONE_WAY_S * 1000)], tmp_path / "logs")
        try:
            wait_until(lambda: port_in_use(port), 10, "the delay proxy")
            variants = {"baseline": port, "candidate": server}
            async with (
                measured_gateway(tmp_path, envoy_binary, variants, {}) as measured,
                httpx.AsyncClient(base_url=measured.url, timeout=10) as client,
            ):
                statuses = []
                for _ in range(4):
                    statuses.append((await client.post("/v1/chat/completions", json=CHAT)).status_code)
                    await asyncio.sleep(IDLE_S)
        finally:
            proxy.stop()
    assert statuses == [200] * 4, statuses
