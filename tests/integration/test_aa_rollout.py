"""An A/A rollout (issue 34): the same graystack server twice, behind variants named otherwise than the form
it names itself (`a` and `b`; both servers call themselves `baseline`), run as a user runs it with
`graystack up --upstream`. A healthy A/A run is promoted and never rolled back; before the gateway counted
answers by the variant Envoy routed them to, this one stayed at its first step, its candidate unmeasured.
Nothing here asserts a duration: the test waits for the outcome, bounded for a machine half as fast.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from graystack.local.processes import wait_until
from graystack.local.rollout_stack import Traffic
from tests.support.model_server import start_model_server, variant_weights, wait_ready
from tests.support.up import alive, graystack, running_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

OUTCOME_S = 300
SPEC = {
    "strategy": {"steps": [{"weight": 20, "hold": "2s"}, {"weight": 50, "hold": "2s"}, {"weight": 100}]},
    "analysis": {"max_ttft_p95": None, "min_detectable_error_rate": 0.05},
}


def status(env: dict) -> dict:
    return json.loads(graystack(env, "status", "--json").stdout)


@pytest.fixture
def env(tmp_path, envoy_binary) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GRAYSTACK_ADMIN_URL", "GRAYSTACK_SPEC")}
    return {**clean, "GRAYSTACK_RUN_STATE": str(tmp_path / "state" / "up.json")}


def test_the_same_server_twice_under_other_names_is_promoted_and_never_rolled_back(tmp_path, env):
    weights = variant_weights(tmp_path / "weights", erased=())["baseline"]
    servers = {name: start_model_server(name, "baseline", weights, tmp_path / "logs") for name in ("a", "b")}
    try:
        for server in servers.values():
            wait_ready(server)
        flags = [option for name, s in servers.items() for option in ("--upstream", f"{name}={s.url}")]
        up = running_up(tmp_path, env, SPEC, *flags, "--baseline", "a", "--no-prometheus")
        process, state, out = next(up)
        try:
            with Traffic(state["envoy_url"], rate=20) as traffic:
                ended = wait_until(
                    lambda: (r := status(env)["rollout"])["phase"] in ("promoted", "rolled_back") and r,
                    OUTCOME_S,
                    "the A/A rollout to end",
                    0.5,
                )
            assert ended["phase"] == "promoted", ended["reason"]
            checks = {c["name"]: c for c in ended["last_decision"]["checks"]}
            assert checks["ttft_vs_baseline"]["samples"] > 0, checks["ttft_vs_baseline"]  # b was measured
            named = {(m["variant"], m["named"]) for m in status(env)["misnamed"]}
            assert named == {("a", "baseline"), ("b", "baseline")}  # told, and no decision changed
            assert {variant for _, variant in traffic.answers} == {"a", "b"}  # clients see the variant
            assert {code for code, _ in traffic.answers} == {200}
        finally:
            process.send_signal(signal.SIGTERM)
            next(up, None)
        assert process.wait(timeout=60) == 0, out.read_text()
        assert [name for name, pid in state["processes"].items() if alive(pid)] == []
    finally:
        for server in servers.values():
            server.process.stop()
