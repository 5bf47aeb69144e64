"""strategy: experiment on the real stack (issue 38 item 3): the real gateway and Envoy, two scripted
upstreams (tests/support/scripted_upstream.py) the candidate's first content 300 ms later than the
baseline's, an even split, streamed traffic. The report (GET /v1/experiment) decides the TTFT difference
with an interval that covers the true ratio, while the guard, its latency comparison off, lets it run."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest

from tests.integration.test_answers_rollback import CHAT, stream_forever
from tests.support.measured import Measured, measured_gateway
from tests.support.scripted_upstream import FIRST_TOKEN_S, ScriptedUpstream, served_scripted_upstream

pytestmark = pytest.mark.integration

SLOWER_BY = 0.3
OVERHEAD = (
    0.05  # at most this much of each first token is the gateway's, Envoy's and the loop's, not the script's
)
EXPERIMENT = {
    "strategy": {"experiment": {"weights": {"baseline": 50, "candidate": 50}, "duration": "1h"}},
    # the comparison with the baseline would roll a 300 ms slower candidate back: an experiment measures it
    "analysis": {"interval": "1s", "expected_weight_status": None, "max_latency_ratio": None},
}


async def report(measured: Measured) -> dict:
    async with httpx.AsyncClient(timeout=5) as client:
        admin = f"http://127.0.0.1:{measured.gateway.options.admin_port}"
        return (await client.get(f"{admin}/v1/experiment")).json()


async def until_ttft_decided(measured: Measured, within: float = 90) -> dict:
    traffic = asyncio.create_task(stream_forever(measured, 8, CHAT))
    try:
        deadline = time.monotonic() + within
        while True:
            found = await report(measured)
            ttft = {d["name"]: d for d in found.get("differences", [])}.get("ttft_p50")
            if (ttft is not None and ttft["decided"]) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(1)
    finally:
        traffic.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await traffic


async def test_an_experiment_between_servers_of_different_speed_reports_an_interval_covering_the_truth(
    tmp_path, envoy_binary
):
    with (
        served_scripted_upstream() as fast,
        served_scripted_upstream(ScriptedUpstream(slower_by=SLOWER_BY)) as slow,
    ):
        variants = {"baseline": fast, "candidate": slow}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, EXPERIMENT) as measured:
            found = await until_ttft_decided(measured)
    differences = {d["name"]: d for d in found["differences"]}
    ttft = differences["ttft_p50"]
    assert ttft["decided"], found
    # the true ratio is (FIRST_TOKEN_S + SLOWER_BY + o) / (FIRST_TOKEN_S + o), o the path's own share
    slowest, fastest = (
        (FIRST_TOKEN_S + SLOWER_BY) / FIRST_TOKEN_S,
        (FIRST_TOKEN_S + SLOWER_BY + OVERHEAD) / (FIRST_TOKEN_S + OVERHEAD),
    )
    assert ttft["lower"] <= slowest, found
    assert ttft["upper"] is not None
    assert ttft["upper"] >= fastest, found
    assert not differences["error_rate"]["decided"], found  # neither variant fails
    assert found["candidate"] == "candidate"
    assert not found["concluded"] or found["decided"]
