"""A candidate that breaks its streams after `200` is rolled back (issue 26): Envoy counts each such
answer as the 200 it sent, so only the gateway's own measurement (gateway/answers/, added to the error
tests by gateway/metrics/answered.py) sees them. The real gateway and Envoy, the `direct` provider, two
scripted upstreams: the baseline answers every stream whole, the candidate sends an error chunk after
its first content in one stream of every 20 (5 %, against the default 0.3 % threshold)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest

from tests.support.measured import Measured, measured_gateway
from tests.support.scripted_upstream import ScriptedUpstream, served_scripted_upstream

pytestmark = pytest.mark.integration

ROLLOUT = {
    "strategy": {"steps": [{"weight": 50, "hold": "1h"}, {"weight": 100}]},
    # No probes here: the weight-status check is off, so nothing but the error tests can roll back.
    "analysis": {"interval": "1s", "expected_weight_status": None},
}
CHAT = {"model": "m", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


async def stream_forever(measured: Measured, workers: int = 4, body: dict = CHAT) -> None:
    """Streamed chat requests (`body`) with no routing header (the rollout's split decides), read to the end."""

    async def one_client() -> None:
        async with httpx.AsyncClient(base_url=measured.url, timeout=10) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                        async for _ in response.aiter_bytes():
                            pass

    await asyncio.gather(*(one_client() for _ in range(workers)))


async def rollout(measured: Measured) -> dict:
    async with httpx.AsyncClient(timeout=5) as client:
        admin = f"http://127.0.0.1:{measured.gateway.options.admin_port}"
        return (await client.get(f"{admin}/v1/status")).json()["rollout"]


async def test_a_candidate_breaking_five_percent_of_its_streams_after_200_is_rolled_back(
    tmp_path, envoy_binary
):
    broken = ScriptedUpstream(broken_every=20)
    with served_scripted_upstream() as good, served_scripted_upstream(broken) as bad:
        variants = {"baseline": good, "candidate": bad}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, ROLLOUT) as measured:
            traffic = asyncio.create_task(stream_forever(measured))
            try:
                deadline = time.monotonic() + 90
                state = await rollout(measured)
                while state["phase"] != "rolled_back" and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    state = await rollout(measured)
            finally:
                traffic.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await traffic
            assert broken.answered >= 40, f"the candidate answered {broken.answered} requests"
            assert state["phase"] == "rolled_back", f"not rolled back: {state['reason']}"
            assert "error_rate" in state["reason"], state["reason"]
            # Every answer went out as 200: Envoy's own counters saw no error at all.
            async with httpx.AsyncClient(timeout=5) as client:
                stats = await client.get(
                    f"{measured.envoy_admin}/stats?filter=^cluster.candidate.upstream_rq_5xx$"
                )
            assert stats.text.strip() in ("", "cluster.candidate.upstream_rq_5xx: 0"), stats.text
