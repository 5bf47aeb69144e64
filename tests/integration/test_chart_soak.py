"""The chart's in-cluster soak (`loadtest.enabled`), its rendered commands run here: the master Job's and
the worker Deployment's `locust` command lines and environment, as real distributed Locust processes (a
master and two workers) through the real Envoy to real `graystack serve` model servers (RolloutStack),
the master polling the real gateway's admin API. No cluster runs here: the Service names, /results and
the 0.0.0.0 bind are rewritten to loopback and a temporary folder, and the prompt mix to the CPU-sized
one (LOCAL_MIX); everything else is what the pods run. Nothing here asserts a duration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from graystack.local.processes import free_port, start_process, wait_until
from loadtests.launch import LOCAL_MIX, LOCUSTFILE, wait_for
from tests.support.helm import render

pytestmark = pytest.mark.integration

WORKERS = 2


def _pods(port: int) -> tuple[dict, dict]:
    sets = (
        f"loadtest.enabled=true,loadtest.workers={WORKERS},loadtest.masterPort={port}",
        "loadtest.soak.users=6,loadtest.soak.ramp=2s,loadtest.soak.duration=20s",
    )
    chart = render(sets=sets)
    master = chart.named("Job", "-loadtest-master")["spec"]["template"]["spec"]["containers"][0]
    worker = chart.named("Deployment", "-loadtest-worker")["spec"]["template"]["spec"]["containers"][0]
    return master, worker


def _local(container: dict, rewrite: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The container's command line and environment, with the cluster's names replaced by loopback ones."""
    assert container["command"] == ["locust"]
    argv = [sys.executable, "-m", "locust"]
    for arg in container["args"]:
        for cluster, local in rewrite.items():
            arg = arg.replace(cluster, local)
        argv.append(arg)
    env = {item["name"]: item.get("value", "") for item in container["env"]}
    return argv, {**env, **LOCAL_MIX}


def test_the_charts_master_and_workers_run_a_soak_through_envoy_and_the_master_exits_with_the_verdict(
    rollout_stack, tmp_path
):
    stack = rollout_stack
    port = free_port()
    master_pod, worker_pod = _pods(port)
    results = tmp_path / "results"
    results.mkdir()
    rewrite = {
        "http://gs-graystack-envoy:80": str(stack.client.base_url).rstrip("/"),
        "http://gs-graystack-gateway:9000": stack.admin_url,
        "/app/loadtests/locustfile.py": str(LOCUSTFILE),
        "/results/": f"{results}/",
        "gs-graystack-loadtest-master": "127.0.0.1",
        "0.0.0.0": "127.0.0.1",
    }
    # In a cluster the worker Deployment is often up before the master Job: the workers start first here,
    # so their reports reach the master while its init event runs (once an exit 1 with no summary)
    argv, env = _local(worker_pod, rewrite)
    workers = [start_process(f"worker-{n}", argv, tmp_path, env=env) for n in range(WORKERS)]
    started = list(workers)
    try:
        for worker in workers:
            wait_until(lambda w=worker: "Starting Locust" in w.log(), 60, f"{worker.name} to start")
        argv, env = _local(master_pod, rewrite)
        master = start_process("master", argv, tmp_path, env=env)
        started.append(master)
        probe = worker_pod["readinessProbe"]["exec"]["command"]
        assert probe[0] == "python"
        wait_until(
            lambda: (
                not master.alive() or subprocess.run([sys.executable, *probe[1:]], timeout=30).returncode == 0
            ),
            60,
            "the worker readiness probe to see the master connection",
            interval=0.5,
        )
        assert master.alive(), master.log()[-3000:]  # a master that exits during its start says why
        code = wait_for(master, timeout=240)
        # A worker quits on the master's quit message or, should that be lost, on missing the master's
        # heartbeat for locust's MASTER_HEARTBEAT_TIMEOUT (60 s); either way it must not linger.
        try:
            wait_until(lambda: not any(w.alive() for w in workers), 75, "the workers to quit with the master")
        except TimeoutError as error:
            raise AssertionError("\n".join(w.log()[-2000:] for w in workers)) from error
    finally:
        for process in started:
            process.stop()
    summary = json.loads((results / "summary.json").read_text())
    assert code == 0, (results / "summary.txt").read_text() + master.log()[-3000:]
    assert summary["verdict"] == "pass"
    assert summary["requests"] > 0
    assert summary["failures"] == 0
    assert summary["split"]["ok"]
    assert {v["variant"] for v in summary["variants"]} <= {"baseline", "zero-layer"}
    assert (results / "report.html").stat().st_size > 10_000
    assert (results / "locust_stats.csv").exists()
