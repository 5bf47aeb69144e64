"""A candidate slower to its first token is rolled back on the gateway's own measurement of every answer
(`analysis.latency_source: answers`, issue 26), from servers that export no latency histogram at all:
the real gateway and Envoy, the `direct` provider, two scripted upstreams (tests/support/
scripted_upstream.py), the candidate's first content 300 ms later. Without the answers the check has
nothing to judge and passes with 0 samples; with them it sees every request's exact time."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.integration.test_answers_rollback import rollout, stream_forever
from tests.support.measured import measured_gateway
from tests.support.scripted_upstream import ScriptedUpstream, served_scripted_upstream

pytestmark = pytest.mark.integration

ROLLOUT = {
    "strategy": {"steps": [{"weight": 50, "hold": "1h"}, {"weight": 100}]},
    "analysis": {"interval": "1s", "expected_weight_status": None, "latency_source": "answers"},
}


async def test_a_first_token_300ms_slower_is_rolled_back_on_servers_with_no_histogram(tmp_path, envoy_binary):
    slower = ScriptedUpstream(slower_by=0.3)
    with served_scripted_upstream() as good, served_scripted_upstream(slower) as slow:
        variants = {"baseline": good, "candidate": slow}
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
    assert state["phase"] == "rolled_back", f"not rolled back: {state['reason']}"
    assert "ttft_vs_baseline" in state["reason"], state["reason"]
    checks = {c["name"]: c for c in state["last_decision"]["checks"]}
    assert "each answer's exact time" in checks["ttft_vs_baseline"]["reason"]
    assert checks["error_rate"]["verdict"] != "fail"  # every stream was whole: only its latency failed
