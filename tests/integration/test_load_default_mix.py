"""`graystack up`'s defaults under the locustfile's own default prompt mix (64=6,1024=3,4096=1 bytes,
32 new tokens): 12 and 24 streaming users for 40 seconds, the split flipped twice, no failed request.

The stack is RolloutStack with `up`'s spec and its timeouts (`request: 60s`, `first_byte: 1s`), not
the soak's longer first_byte: what a new user gets (issue 16 saw 64 of 259 streams cut at 12 users,
and `no healthy upstream` at 24). At 12 users the guard is `up`'s own too, with zero-layer at 70 %
first (issue 15: the window rule rolled that faster variant back on a p99 ratio, for carrying more
of the load): it must leave the healthy zero-layer alone. At 24 users the guard is the soak's loosened
one (loadtests.launch.LOCAL_ANALYSIS): CPU servers that loaded breach even `up`'s 10 s TTFT SLO, and
a rollback would refuse the next flip until a retry, the guard working, not what that run is about.
Long: about a minute per user count.
"""

from __future__ import annotations

import csv
import json

import pytest

from graystack.local.processes import start_process
from graystack.local.rollout_stack import RolloutStack
from loadtests.launch import LOCAL_ANALYSIS, Flipper, locust_command, wait_for
from tests.support.stacks import envoy_stats, gateway_metric, running

pytestmark = pytest.mark.integration

FLIP_EVERY = 15.0  # two flips in 40 seconds


@pytest.fixture
def start(tmp_path, envoy_binary):
    started = []

    def start(changes: dict) -> RolloutStack:
        started.append(running(RolloutStack(tmp_path / "stack", envoy_binary, changes)))
        return next(started[-1])

    yield start
    for stack in started:
        next(stack, None)


@pytest.mark.parametrize(
    ("users", "guard", "flips"),
    [(12, {}, [70, 100, 70]), (24, {"analysis": LOCAL_ANALYSIS["analysis"]}, [0, 50, 100])],
)
def test_up_defaults_survive_the_default_mix_with_no_failed_request(start, tmp_path, users, guard, flips):
    stack = start(guard)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    load = {
        "LOAD_SHAPE": "soak",
        "SOAK_USERS": str(users),
        "SOAK_RAMP": "10s",
        "SOAK_DURATION": "40s",
        "LOADTEST_WEIGHTS_POLL": "0.25",
        "LOADTEST_MAX_ERROR_RATE": "0",
    }
    flipper = Flipper(stack.admin_url, FLIP_EVERY, flips[1:])
    assert flipper.flip(flips[0]) == 0
    host = str(stack.client.base_url).rstrip("/")
    locust = start_process("locust", locust_command(run_dir, host, stack.admin_url, []), run_dir, env=load)
    try:
        with flipper:
            code = wait_for(locust, timeout=400)
    finally:
        locust.stop()
    summary = json.loads((run_dir / "summary.json").read_text())
    with (run_dir / "locust_stats.csv").open() as f:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    assert int(rows[("POST", "/v1/messages")]["Failure Count"]) == 0, (run_dir / "summary.txt").read_text()
    assert summary["failures"] == 0
    assert code == 0, (run_dir / "summary.txt").read_text()
    assert {v["variant"] for v in summary["variants"]} == {"baseline", "zero-layer"}
    assert len(flipper.flips) >= 3
    rollout = stack.rollout()
    seen = {key: rollout.get(key) for key in ("reason", "history", "evidence")}
    assert rollout["phase"] == "manual", json.dumps({**seen, "flips": flipper.flips}, indent=1)  # no rollback
    assert gateway_metric(stack, "graystack_analysis_checks_total", {"result": "fail"}) == 0
    assert all(code == 0 for _, _, code in flipper.flips), flipper.flips
    stats = envoy_stats(stack)
    assert sum(v for k, v in stats.items() if k.endswith("upstream_rq_per_try_idle_timeout")) == 0
