"""A CI-sized soak: Locust as a real headless subprocess, 20 streaming users for about 40 s (a 5 s
ramp, then 35 s), through the real Envoy to real `graystack serve` model servers for both variants
(RolloutStack: probes and the gateway's guard included), while `graystack weight` flips the default
split every 4 s. Every request must succeed, every flip period's observed split must hold its
configured weights within its interval, and the report (CSV, HTML, summary) must be written.

Why the real servers and not the stand-ins: the stand-in upstreams do not stream, and streaming is
what the users measure. Tried on 2 shared CPUs: 20 users with 32-256 byte prompts and 16 new tokens
ran with no failure; with the default mix's 4 KiB prompts the CPU baseline stalled past Envoy's
per-try idle timeout (10 s) and its streams were cut, so the CI mix is the short one (LOCAL_MIX).
Nothing here asserts a duration.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import socket
import threading

import pytest

from graystack.local.processes import start_process, wait_until
from loadtests.launch import LOCAL_MIX, Flipper, locust_command, wait_for

pytestmark = pytest.mark.integration

USERS = 20
FLIP_EVERY = 4.0
FLIPS = [50, 80, 0, 100, 20]  # zero-layer's share, cycled
CI_MIX = {
    "LOAD_SHAPE": "soak",
    "SOAK_USERS": str(USERS),
    "SOAK_RAMP": "5s",
    "SOAK_DURATION": "35s",
    **LOCAL_MIX,
    "LOADTEST_WEIGHTS_POLL": "0.25",
    "LOADTEST_MAX_ERROR_RATE": "0",  # the verdict itself demands zero failed requests
    # The split check's family-wise false alarm rate: the users' default 1 % would fail one correct CI run
    # in a hundred; a flip that reaches Envoy late still fails at any alpha (its 0 and 100 % periods
    # admit no stray request)
    "LOADTEST_SPLIT_ALPHA": "0.001",
}


def test_streaming_users_across_weight_flips_fail_nothing_and_every_split_holds(rollout_stack, tmp_path):
    stack = rollout_stack
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    flipper = Flipper(stack.admin_url, FLIP_EVERY, FLIPS)
    assert flipper.flip(20) == 0
    host = str(stack.client.base_url).rstrip("/")
    locust = start_process("locust", locust_command(run_dir, host, stack.admin_url, []), run_dir, env=CI_MIX)
    try:
        with flipper:
            code = wait_for(locust, timeout=240)
    finally:
        locust.stop()
    log = locust.log()
    assert not locust.alive()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 0, (run_dir / "summary.txt").read_text() + log[-3000:]
    assert summary["verdict"] == "pass"

    # Zero failed requests, by Locust's own count as well as ours.
    with (run_dir / "locust_stats.csv").open() as f:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    posts = rows[("POST", "/v1/messages")]
    assert int(posts["Failure Count"]) == 0
    assert summary["requests"] > 10 * USERS
    # Locust writes its CSV as the run stops; a user's request that ends just then is in one count only.
    assert abs(int(posts["Request Count"]) - summary["requests"]) <= USERS
    assert summary["failures"] == 0

    # Both variants answered, each with its own TTFT/ITL/E2E entries in the report.
    variants = {v["variant"]: v for v in summary["variants"]}
    assert set(variants) == {"baseline", "zero-layer"}
    for variant in variants:
        for kind in ("TTFT", "ITL", "E2E"):
            assert int(rows[(kind, variant)]["Request Count"]) > 0
        assert variants[variant]["latency"]["ttft"]["p50"] <= variants[variant]["latency"]["e2e"]["p50"]

    # The gateway measured the same streams (its own count, from Envoy's answer log): every one whole,
    # none failed after its 200, within a few of what the users sent (the probes' requests go straight
    # to the pods; the run's last streams may end after the summary read the gateway).
    measured = {g["variant"]: g for g in summary["gateway"]}
    assert set(measured) == {"baseline", "zero-layer"}
    answered = sum(g["answers"] for g in measured.values())
    assert summary["requests"] - USERS <= answered <= summary["requests"] + USERS
    for g in measured.values():
        assert g["endings"].get("error", 0) == g["endings"].get("cut", 0) == 0, g
        assert g["output_tokens"] > 0
        assert g["ttft"]["p50"] > 0

    # The flips went live (every proxy ACKed), and each period kept to its weights.
    assert len(flipper.flips) >= len(FLIPS) + 1  # the first, then every weight at least once
    assert all(code == 0 for _, _, code in flipper.flips), flipper.flips
    split = summary["split"]
    assert split["ok"]
    assert split["periods"] >= len(FLIPS) + 1
    assert split["counted"] > split["excluded"]
    configured = {
        c["expected"] for c in split["checks"] if c["client_type"] == "-" and c["variant"] == "zero-layer"
    }
    assert configured >= {0.0, 0.2, 0.5, 0.8, 1.0}
    assert all(c["lower"] <= c["expected"] <= c["upper"] for c in split["checks"])

    # The report is written: Locust's HTML, and the summary text naming the verdict.
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert "graystack load test: PASS (exit 0)" in (run_dir / "summary.txt").read_text()
    assert os.path.exists(run_dir / "locust_stats_history.csv")


class HangingUp:
    """A loopback listener that closes every connection it accepts: each request fails, and the count
    says when some have (a SIGTERM before the first would leave nothing to judge)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # closed at the end of the test
            while True:
                connection, _ = self.sock.accept()
                connection.close()
                self.accepted += 1


def test_a_soak_stopped_by_pid_still_writes_its_report_and_fails_on_its_error_budget(tmp_path):
    """Every request fails (the target hangs up); SIGTERM mid-soak (Locust 2.47 would die of it without
    a report, see loadtests/locustfile.py) must still give the summary, the HTML report and the failing
    verdict as the exit code."""
    target = HangingUp()
    env = {"LOAD_SHAPE": "soak", "SOAK_USERS": "2", "SOAK_RAMP": "1s", "SOAK_DURATION": "1h"}
    argv = locust_command(tmp_path, target.url, None, ["--expected-weights", "baseline=100"])
    locust = start_process("locust", argv, tmp_path, env=env)
    try:
        wait_until(lambda: target.accepted >= 4, 60, "Locust's users to send (and fail) some requests")
    finally:
        locust.stop(grace=60)  # SIGTERM to its PID
        target.sock.close()
    code = locust.popen.returncode
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == 1, locust.log()[-3000:]
    assert summary["verdict"] == "fail"
    assert summary["requests"] == summary["failures"] > 0
    assert summary["reasons"][0].startswith("error rate 100.000% above the 0.300% budget")
    assert (tmp_path / "report.html").exists()
