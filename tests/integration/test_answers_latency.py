"""A candidate slower to its first token is rolled back on the gateway's own measurement of every answer
(`analysis.latency_source: answers`, issue 26), from servers that export no latency histogram at all:
the real gateway and Envoy, the `direct` provider, and either two scripted upstreams (tests/support/
scripted_upstream.py), the candidate's first content 300 ms later, or llama.cpp, the candidate the same
server behind a proxy that delays each direction by 150 ms. Without the answers the check has nothing to
judge and passes with 0 samples (llama.cpp exports no TTFT histogram); with them it sees every request's
exact time."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

import pytest

from gateway.answers.receiver import AnswerReceiver
from graystack.local.processes import free_port, port_in_use, start_process, wait_until
from tests.integration.test_answers_rollback import CHAT, rollout, stream_forever
from tests.support.measured import Measured, measured_gateway
from tests.support.scripted_upstream import ScriptedUpstream, served_scripted_upstream
from tests.support.third_party.models import MODEL_NAME

pytestmark = pytest.mark.integration

ROLLOUT = {
    "strategy": {"steps": [{"weight": 50, "hold": "1h"}, {"weight": 100}]},
    "analysis": {"interval": "1s", "expected_weight_status": None, "latency_source": "answers"},
}


async def until_rolled_back(measured: Measured, body: dict, within: float = 90, workers: int = 4) -> dict:
    """The rollout's status once it rolled back (or `within` seconds passed), under streamed traffic from
    `workers` clients."""
    traffic = asyncio.create_task(stream_forever(measured, workers, body))
    try:
        deadline = time.monotonic() + within
        state = await rollout(measured)
        while state["phase"] != "rolled_back" and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            state = await rollout(measured)
        return state
    finally:
        traffic.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await traffic


def rolled_back_on_latency(state: dict) -> None:
    checks = {c["name"]: c for c in state["last_decision"]["checks"]}
    assert state["phase"] == "rolled_back", (
        f"not rolled back: {state['reason']}; {checks.get('ttft_vs_baseline')}"
    )
    assert "ttft_vs_baseline" in state["reason"], state["reason"]
    assert "each answer's exact time" in checks["ttft_vs_baseline"]["reason"]
    assert checks["error_rate"]["verdict"] != "fail"  # every stream was whole: only its latency failed


async def test_a_first_token_300ms_slower_is_rolled_back_on_servers_with_no_histogram(tmp_path, envoy_binary):
    slower = ScriptedUpstream(slower_by=0.3)
    with served_scripted_upstream() as good, served_scripted_upstream(slower) as slow:
        variants = {"baseline": good, "candidate": slow}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, ROLLOUT) as measured:
            # 16 clients: about 25 answers a second. With 4 (about 5 a second) the candidate's share of
            # requests per pod is too uncertain for the load gate (checks/latency.py MAX_LOAD_RATIO) to
            # say its pod was not busier, and a run could go on for a minute with its looks left out.
            state = await until_rolled_back(measured, CHAT, workers=16)
    rolled_back_on_latency(state)


async def test_llama_cpp_300ms_slower_to_its_first_token_is_rolled_back(tmp_path, envoy_binary, llama_cpp):
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.support.delay_proxy",
        str(port),
        f"127.0.0.1:{llama_cpp.port}",
        "150",
    ]
    proxy = start_process("delay-proxy", argv, tmp_path / "logs")
    try:
        wait_until(lambda: port_in_use(port), 10, "the delay proxy")
        variants = {"baseline": llama_cpp.port, "candidate": port}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, ROLLOUT) as measured:
            state = await until_rolled_back(measured, {**CHAT, "model": MODEL_NAME}, within=120)
    finally:
        proxy.stop()
    rolled_back_on_latency(state)
    # Its inter-token latency is judged too, for the first time: each answer's mean time per token.
    itl = {c["name"]: c for c in state["last_decision"]["checks"]}["itl_vs_baseline"]
    assert itl["samples"] > 0, itl
    assert "each answer's exact time" in itl["reason"], itl


async def test_with_no_answer_reaching_the_gateway_the_latency_checks_hold_and_say_so(
    tmp_path, envoy_binary, monkeypatch
):
    """The receiver drops every entry (as if Envoy's access log were blackholed on its way): requests
    are served as ever, and status says the measurements are missing instead of passing the checks."""
    monkeypatch.setattr(AnswerReceiver, "take", lambda self, entry: None)
    with (
        served_scripted_upstream() as good,
        served_scripted_upstream(ScriptedUpstream(slower_by=0.3)) as slow,
    ):
        variants = {"baseline": good, "candidate": slow}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, ROLLOUT) as measured:
            state = await until_rolled_back(measured, CHAT, within=8)
    assert state["phase"] == "progressing", state["reason"]
    checks = {c["name"]: c for c in state["last_decision"]["checks"]}
    assert checks["error_rate"]["samples"] > 0  # the candidate served its share, and failed none
    assert checks["error_rate"]["verdict"] != "fail"
    for name in ("ttft_vs_baseline", "itl_vs_baseline"):
        assert checks[name]["verdict"] == "inconclusive", checks[name]
        assert checks[name]["reason"].startswith("measurements missing: Envoy sent the candidate"), checks[
            name
        ]
