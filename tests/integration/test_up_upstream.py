"""`graystack up --upstream` in front of two servers nobody here wrote, llama.cpp and `transformers serve`
(session fixtures: tests/support/third_party/), as a user runs it: a background `up`, the CLI finding it
through the run-state file alone. No graystack model server runs; neither server has a TTFT histogram
and no probe runs, so the rollout is judged on errors alone and steps to 100 %; then a fault injected
by the gateway (`graystack fault`) fails every attempt on the promoted variant, the guard rolls it back,
and the fallback retry hides every failure from clients. Nothing here asserts a duration.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from graystack.local.processes import wait_until
from graystack.local.rollout_stack import Traffic
from tests.support.third_party.servers import chat_body
from tests.support.up import alive, graystack, running_up

pytestmark = pytest.mark.integration

SPEC = {
    "strategy": {"steps": [{"weight": 50, "hold": "2s"}, {"weight": 100}]},
    # Two different engines: the gateway measures every answer, and transformers serve's are several
    # times slower than llama.cpp's; this rollout is about errors, so no latency comparison.
    "analysis": {"max_error_rate": 0.015, "min_detectable_error_rate": 0.1, "max_latency_ratio": None},
}


def rollout(env: dict) -> dict:
    return json.loads(graystack(env, "status", "--json").stdout)["rollout"]


@pytest.fixture
def env(tmp_path, envoy_binary) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GRAYSTACK_ADMIN_URL", "GRAYSTACK_SPEC")}
    return {**clean, "GRAYSTACK_RUN_STATE": str(tmp_path / "state" / "up.json")}


def test_up_fronts_servers_it_did_not_start_promotes_on_errors_and_rolls_a_gateway_fault_back(
    tmp_path, env, llama_cpp, transformers_serve
):
    flags = [
        "--upstream",
        f"llama-cpp={llama_cpp.url}",
        "--upstream",
        f"transformers={transformers_serve.url}",
    ]
    up = running_up(tmp_path, env, SPEC, *flags, "--no-prometheus")
    process, state, out = next(up)
    try:
        assert set(state["processes"]) == {"envoy", "gateway"}  # no model server, no probe
        assert state["model_servers"] == {"llama-cpp": llama_cpp.url, "transformers": transformers_serve.url}
        spec = json.loads(graystack(env, "status", "--json").stdout)
        off = spec["rollout"]["evidence"]["off"]
        assert "weight_status" in off  # no probe is required of servers with no checkpoint given

        chat = {"path": "/v1/chat/completions", "bodies": [chat_body()]}
        with Traffic(state["envoy_url"], rate=20, segment_share=0, **chat) as traffic:
            promoted = wait_until(
                lambda: (r := rollout(env))["phase"] == "promoted" and r,
                120,
                "the rollout to reach 100 %",
                0.5,
            )
            # promoted on the evidence: the step's reason quotes the checks that passed (the last decision
            # may already be a look after the promotion, whose fresh stage is still extending)
            (step,) = [t for t in promoted["history"] if t["target"] == "promoted"]
            assert step["reason"].startswith("checks passed after"), step
            assert "error_rate=" in step["reason"], step
            checks = {c["name"]: c for c in promoted["last_decision"]["checks"]}
            assert checks["ttft_p95"]["samples"] > 0  # no TTFT histogram from either: the gateway measured

            injected = graystack(env, "fault", "transformers", "--error-rate", "1.0")
            assert injected.returncode == 0, injected.stderr
            rolled_back = wait_until(
                lambda: (r := rollout(env))["phase"] == "rolled_back" and not r["rollback_in_flight"] and r,
                90,
                "the guard to roll transformers back",
                0.5,
            )
        assert "error_rate" in rolled_back["reason"], rolled_back["reason"]
        assert json.loads(graystack(env, "status", "--json").stdout)["routing"]["weights"] == {
            "llama-cpp": 100,
            "transformers": 0,
        }
        assert {code for code, _ in traffic.answers} == {200}, (
            traffic.answers
        )  # the fallback hid every failure
        assert {variant for _, variant in traffic.answers} == {
            "llama-cpp",
            "transformers",
        }  # Envoy names them
        assert graystack(env, "fault", "transformers", "--clear").returncode == 0
    finally:
        process.send_signal(signal.SIGTERM)
        next(up, None)
    assert process.wait(timeout=60) == 0, out.read_text()
    assert [name for name, pid in state["processes"].items() if alive(pid)] == []
    assert llama_cpp.process.alive()  # the user's servers are left be
    assert transformers_serve.process.alive()
