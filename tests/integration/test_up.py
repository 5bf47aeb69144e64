"""`graystack up` as a user runs it: a background process (`python -m graystack up`) that starts the real
Envoy, the real gateway, real `graystack serve` model servers for both variants, their probes and (when
installed) the real Prometheus; the operator's CLI finds it through the run-state file alone. A weight
flip moves traffic, a fault injected into zero-layer is rolled back by the guard, a second `up` is
refused, and SIGTERM stops every process it started.

The spec is in manual mode (no strategy: the split is the operator's, the guard still runs), with a
short analysis window so that the rollback needs only a few seconds of traffic. Nothing here asserts
a duration.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from graystack.local.processes import wait_until
from graystack.local.prometheus import ALERT_RULES
from graystack.local.rollout_stack import Traffic
from tests.support.up import alive, graystack, running_up

pytestmark = pytest.mark.integration

SPEC = {
    "analysis": {
        "interval": "1s",
        "window": "10s",
        "min_requests": 20,
        "max_error_rate": 0.015,
        "min_detectable_error_rate": 0.1,
        "max_latency_ratio": 10,  # CPU model servers on a shared box: not what this test is about
        "max_ttft_p95": "5s",
    }
}
BODY = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}


def scraped(prometheus_url: str) -> set[str] | None:
    """The jobs Prometheus scrapes, once every one of them is up."""
    targets = httpx.get(f"{prometheus_url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
    health = {t["labels"]["job"]: t["health"] for t in targets}
    return set(health) if health and set(health.values()) == {"up"} else None


def analysis_errors(admin_url: str) -> float:
    """Analysis checks the gateway judged `error` (metrics it could not read), every check together."""
    text = httpx.get(f"{admin_url}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "graystack_analysis_checks_total" and sample.labels["result"] == "error"
    )


@pytest.fixture
def env(tmp_path, envoy_binary) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GRAYSTACK_ADMIN_URL", "GRAYSTACK_SPEC")}
    return {**clean, "GRAYSTACK_RUN_STATE": str(tmp_path / "state" / "up.json")}


@pytest.fixture
def up(tmp_path, env):
    yield from running_up(tmp_path, env, SPEC)


def test_up_runs_the_stack_for_the_cli_rolls_back_a_fault_and_stops_every_process(up, env):
    process, state, out = up
    assert set(state["processes"]) >= {"envoy", "gateway", "baseline", "zero-layer"} | {
        "probe-baseline",
        "probe-zero-layer",
    }
    assert all(alive(pid) for pid in state["processes"].values())
    assert analysis_errors(state["admin_url"]) == 0  # the gateway started before Envoy: it held, no error

    second = graystack(env, "up", "--free-ports")
    assert second.returncode != 0
    assert f"a graystack stack is already running (supervisor pid {process.pid}" in second.stderr

    flipped = graystack(env, "weight", "zero-layer=30")
    assert flipped.returncode == 0, flipped.stderr
    assert "baseline 70%  zero-layer 30% (ACKed by every proxy" in flipped.stdout
    with httpx.Client(base_url=state["envoy_url"], timeout=15) as client:
        served = [client.post("/v1/messages", json=BODY).headers["x-graystack-variant"] for _ in range(60)]
    assert 0 < served.count("zero-layer") < 60

    # Ctrl-C as a terminal sends it: a suite run as a background job (`.ci/run &`) starts with SIGINT
    # ignored, which children inherit and Python then leaves ignored; a default survives exec. (A shim,
    # not a preexec_fn: see dying_with_parent in graystack/local/processes.py.)
    default_sigint = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    status = [sys.executable, "-m", "graystack", "status", "--watch", "--interval", "0.5"]
    watch = subprocess.Popen(
        [sys.executable, "-c", default_sigint, *status],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # wide enough that the footer (Envoy's URL, the logs' path under tmp_path, the Ctrl-C hint) fits on
        # one line: the path is longer under pytest-xdist (.../popen-gw3/...) and under a long TMPDIR
        env={**env, "COLUMNS": "240"},
    )
    try:
        time.sleep(10)  # a few frames; then leave it as an operator does
        watch.send_signal(signal.SIGINT)
        view, errors = watch.communicate(timeout=30)
    finally:
        watch.kill()  # a no-op once it has left; else it must not outlive the test
        watch.wait(timeout=10)
    assert watch.returncode == 0, errors
    assert re.search(r"zero-layer +│ +30% │", view), view  # then req/s, errors, TTFT p95, weight status
    assert "ERASED" in view
    assert "(the stack keeps running)" in view

    if state["prometheus_url"]:  # present here and in CI; `up` runs without it elsewhere
        jobs = wait_until(lambda: scraped(state["prometheus_url"]), 30, "Prometheus to scrape every target")
        assert set(jobs) == {"envoy", "gateway", "model-baseline", "model-zero-layer"} | {
            "probe-baseline",
            "probe-zero-layer",
        }
        rules = httpx.get(f"{state['prometheus_url']}/api/v1/rules", timeout=5).json()["data"]["groups"]
        loaded = {rule["name"] for group in rules for rule in group["rules"]}
        assert ("GraystackRolloutRolledBack" in loaded) == ALERT_RULES.exists()

    injected = graystack(env, "fault", "zero-layer", "--error-rate", "0.5")
    assert injected.returncode == 0, injected.stderr
    with Traffic(state["envoy_url"], rate=20, segment_share=0) as traffic:
        rolled_back = wait_until(
            lambda: (
                (r := json.loads(graystack(env, "status", "--json").stdout)["rollout"])["phase"]
                == "rolled_back"
                and not r["rollback_in_flight"]
                and r
            ),
            60,
            "the guard to roll zero-layer back",
            interval=0.5,
        )
    assert rolled_back["reason"].startswith("rolled back: error_rate fail")
    status = json.loads(graystack(env, "status", "--json").stdout)
    assert status["routing"]["weights"] == {"baseline": 100, "zero-layer": 0}
    assert {code for code, _ in traffic.answers} == {200}, traffic.answers  # the fallback hid every fault
    again = graystack(env, "rollback")
    assert again.returncode == 1
    assert "rollback ignored: already rolled back" in again.stderr
    assert graystack(env, "fault", "zero-layer", "--clear").returncode == 0
    retried = graystack(env, "retry")
    assert retried.returncode == 0, retried.stderr
    assert "retry: rollout now at manual" in retried.stdout

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    assert f"stopped every process; logs in {state['logs']}" in out.read_text()
    assert [name for name, pid in state["processes"].items() if alive(pid)] == []
    assert not Path(env["GRAYSTACK_RUN_STATE"]).exists()
    assert (Path(state["logs"]) / "gateway.log").exists()


def test_up_names_missing_weights_and_starts_nothing(tmp_path, env):
    refused = graystack(env, "up", "--free-ports", "--weights-dir", str(tmp_path / "empty"))
    assert refused.returncode == 1
    assert f"baseline: {tmp_path / 'empty' / 'baseline.safetensors'}: weights missing" in refused.stderr
    assert "graystack weights init" in refused.stderr
    assert not Path(env["GRAYSTACK_RUN_STATE"]).exists()


def test_up_expects_the_served_form_and_rolls_back_a_checkpoint_erased_under_it(tmp_path, env):
    """Its spec names no expected_weight_status: `up` expects the zero-layer checkpoint's own form (here
    ACTIVE) and says so; the checkpoint rewritten under the running server is caught by its probe."""
    weights = tmp_path / "weights"
    for variant in ("baseline", "zero-layer"):
        made = graystack(
            env, "weights", "init", "--variant", variant, "--out", str(weights / f"{variant}.safetensors")
        )
        assert made.returncode == 0, made.stderr
    stack = running_up(tmp_path, env, SPEC, "--weights-dir", str(weights))
    *_, out = next(stack)
    try:
        assert "the guard expects ACTIVE" in out.read_text()
        erased = graystack(env, "weights", "erase", str(weights / "zero-layer.safetensors"))
        assert erased.returncode == 0, erased.stderr
        rollout = wait_until(
            lambda: (
                (r := json.loads(graystack(env, "status", "--json").stdout)["rollout"])["phase"]
                == "rolled_back"
                and r
            ),
            60,
            "the guard to roll back the erased checkpoint",
            interval=0.5,
        )
        assert rollout["reason"].startswith("rolled back: weight_status fail"), rollout["reason"]
        assert "pods report ['ERASED'], expected one of ['ACTIVE']" in rollout["reason"]
    finally:
        next(stack, None)
