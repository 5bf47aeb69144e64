"""The rollout controller end to end on loopback: the real `graystack gateway` (with `--envoy-admin` and
`--metrics-target`), the real Envoy, real `graystack serve` model servers for both variants and their
probes, and clients sending steady traffic through Envoy. A fault injected into zero-layer (5 % of
its requests fail) at the 20 % step rolls every request back to the baseline by itself; cleared and
retried, the rollout promotes to 100 %.

Half the clients send `X-Client-Type: high_load`, the segment the spec sends wholly to zero-layer, so
the candidate sees enough requests to fail fast and to end each stage soon at 40 requests/s; that segment
must go to the baseline too once rolled back. Nothing here asserts a duration.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from graystack.local.gateway_stack import graystack_argv
from graystack.local.processes import wait_until
from graystack.local.rollout_stack import SEGMENT, RolloutStack, Traffic
from tests.support.processes import require_binary
from tests.support.prometheus import start_prometheus
from tests.support.stacks import gateway_metric, running, variant_counts

pytestmark = pytest.mark.integration

RATE = 40  # requests per second, all clients together
MAX_ERROR_RATE = 0.005
ROLLOUT = {
    "strategy": {"steps": [{"weight": 20, "hold": "1s"}, {"weight": 100}]},
    "analysis": {
        "interval": "1s",
        "window": "10s",
        "min_requests": 20,
        "max_error_rate": MAX_ERROR_RATE,
        "min_detectable_error_rate": 0.05,  # each stage just long enough to catch the 5 % fault
        "max_latency_ratio": 10,  # CPU model servers on a shared box: not what this test is about
        "max_ttft_p95": "5s",
        "provider": {"type": "direct"},
    },
}


SHADOW = {"percent": 100, "duration": "2s", "gate": {"success_rate": 0.99, "max_latency_ratio": 10}}
SHADOW_ROLLOUT = ROLLOUT | {"strategy": {"shadow": SHADOW, "steps": [{"weight": 20, "hold": "60s"}]}}


def faulty(tmp_path, envoy_binary, rollout: dict) -> RolloutStack:
    """A RolloutStack whose zero-layer fails 5 % of its requests from the start."""
    return RolloutStack(tmp_path, envoy_binary, rollout, error_rate=0.05)


@pytest.fixture
def stack(tmp_path, envoy_binary):
    yield from running(faulty(tmp_path, envoy_binary, ROLLOUT))  # it meets the fault at its 20 % step


@pytest.fixture
def shadow_stack(tmp_path, envoy_binary):
    yield from running(faulty(tmp_path, envoy_binary, SHADOW_ROLLOUT))  # it meets the fault in shadow


@pytest.fixture
def prometheus_stack(tmp_path, envoy_binary):
    """The guard reading a real Prometheus that scrapes the real Envoy every second."""
    binary = require_binary("prometheus", "Debian's prometheus package", provided_by="make prometheus")
    stack = faulty(tmp_path, envoy_binary, ROLLOUT)
    envoy = (f"127.0.0.1:{stack.ports['envoy_admin']}", "/stats/prometheus")
    prometheus = start_prometheus(binary, tmp_path / "prometheus", {"envoy": envoy})
    provider = {"type": "prometheus", "url": prometheus.url}
    stack.models.spec_changes = ROLLOUT | {"analysis": ROLLOUT["analysis"] | {"provider": provider}}
    try:
        yield from running(stack)
    finally:
        prometheus.stop()
        assert not prometheus.process.alive(), f"prometheus (pid {prometheus.process.pid}) left running"


def wait_rolled_back(stack) -> dict:
    return wait_until(
        lambda: (r := stack.rollout())["phase"] == "rolled_back" and not r["rollback_in_flight"] and r,
        40,
        "the guard to roll back and every proxy to ACK it",
        interval=0.2,
    )


def test_a_faulty_candidate_is_rolled_back_by_the_guard_and_a_clean_retry_promotes(stack):
    assert stack.rollout()["label"] == "step 0"
    # The gateway analysed before Envoy connected: those intervals held, none was a metrics error.
    assert gateway_metric(stack, "graystack_analysis_checks_total", {"result": "error"}) == 0
    with Traffic(stack.client.base_url, RATE) as traffic:
        rolled_back = wait_rolled_back(stack)
        checks = {c["name"]: c for c in rolled_back["last_decision"]["checks"]}
        assert checks["error_rate"]["verdict"] == "fail"
        assert checks["error_rate"]["value"] > MAX_ERROR_RATE
        assert rolled_back["reason"].startswith("rolled back: error_rate fail")
        status = stack.status()
        assert status["routing"]["weights"] == {"baseline": 100, "zero-layer": 0}
        assert {r["value"]: r["weights"] for r in status["routing"]["rules"]} == {
            "high_load": {"baseline": 100},
            "mobile": {"baseline": 100},
        }
        assert status["xds"]["converged"]
        assert len(status["xds"]["proxies"]) == 1
        for headers in ({}, SEGMENT, {"X-Client-Type": "mobile"}):
            assert variant_counts(stack, 10, headers) == {"baseline": 10, "zero-layer": 0}
        assert gateway_metric(stack, "graystack_rollback_seconds_count", {"rollout": "zero-layer"}) == 1
        reason = {"rollout": "zero-layer", "reason": "error_rate"}
        assert gateway_metric(stack, "graystack_rollout_rollbacks_total", reason) == 1
        assert json.loads(stack.state_path.read_text())["state"]["phase"] == "rolled_back"
        assert "phase     rolled_back" in stack.cli("status")

        # Healthy again, retry: new tests start, and it promotes by itself.
        stack.clear_fault()
        assert "rollout now at step 0" in stack.cli("retry")
        promoted = wait_until(
            lambda: (r := stack.rollout())["phase"] == "promoted" and r, 40, "the rollout to pass its steps"
        )
        assert promoted["weight"] == 100
        assert stack.status()["routing"]["weights"] == {"baseline": 0, "zero-layer": 100}
        refused = subprocess.run(
            [*graystack_argv(), "promote", "--admin-url", stack.admin_url],
            capture_output=True,
            text=True,
        )
        assert refused.returncode == 1
        assert "promote ignored: nothing advances in phase promoted" in refused.stderr
    assert {code for code, _ in traffic.answers} == {200}, traffic.answers  # the fallback hid every fault


def test_a_shadow_phase_judges_the_candidate_on_mirrored_copies_that_no_client_sees(shadow_stack):
    """Shadow: the baseline answers every client while Envoy mirrors each request to zero-layer. The
    faulty candidate is rolled back on the copies' failures alone; healed and retried, it leaves
    shadow through the gate for its first step, and the mirror stops."""
    stack = shadow_stack
    assert stack.rollout()["label"] == "shadow"
    assert stack.status()["routing"]["mirror"] == {"variant": "zero-layer", "percent": 100}
    with Traffic(stack.client.base_url, RATE, segment_share=0) as traffic:
        rolled_back = wait_rolled_back(stack)
        assert traffic.snapshot().keys() == {(200, "baseline")}  # no client met zero-layer, or a retry
        error_rate = next(c for c in rolled_back["last_decision"]["checks"] if c["name"] == "error_rate")
        assert error_rate["verdict"] == "fail"
        assert error_rate["samples"] > 0
        assert stack.status()["routing"]["mirror"] is None

        stack.clear_fault()
        assert "rollout now at shadow" in stack.cli("retry")
        stepped = wait_until(
            lambda: (r := stack.rollout())["phase"] == "progressing" and r, 40, "the shadow gate to open"
        )
        assert stepped["weight"] == 20
        assert stepped["history"][-1]["source"] == "shadow"
        assert stack.status()["routing"]["mirror"] is None
        # the mirrored copies' answers were measured on their way (gateway/envoy/shadow.py) and judged
        judged = {c["name"]: c for c in stepped["last_decision"]["checks"]}["ttft_vs_baseline"]
        assert judged["samples"] > 0, judged
        assert "each answer's exact time" in judged["reason"]
    assert {code for code, _ in traffic.answers} == {200}, traffic.answers


def test_the_guard_rolls_back_on_what_prometheus_scraped_from_envoy(prometheus_stack):
    """The same fault, judged through the prometheus provider: PromQL over Envoy's counters as a real
    Prometheus scraped them, not the gateway's own scrapes."""
    stack = prometheus_stack
    with Traffic(stack.client.base_url, RATE) as traffic:
        rolled_back = wait_rolled_back(stack)
    error_rate = next(c for c in rolled_back["last_decision"]["checks"] if c["name"] == "error_rate")
    assert error_rate["verdict"] == "fail"
    assert rolled_back["reason"].startswith("rolled back: error_rate fail")
    assert stack.status()["routing"]["weights"] == {"baseline": 100, "zero-layer": 0}
    assert {code for code, _ in traffic.answers} == {200}, traffic.answers
