"""An A/A rollout as a user runs one (issue 34): the same graystack server twice, behind variants named
otherwise than the form it names itself (`a` and `b`; both call themselves `baseline`), under
`graystack up --upstream`, the locustfile's default mix at 12 users, a strategy with short holds; with
cohorts, `routing.affinity` on `x-user-id` and half the users the locustfile's conversation user.

What it records is what the test asserts and bench/aa_rollout.py reports: how the rollout ended, how
long it took from the first request, and each stage's candidate requests as the guard counted them.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from graystack.local.processes import start_process, wait_until
from loadtests.launch import locust_command, wait_for
from tests.support.model_server import start_model_server, wait_ready
from tests.support.up import running_up

USERS = 12
CONVERSATIONS = "0.5"  # the share of the users that are the locustfile's conversation user, with cohorts
STEPS = (50, 100)  # the candidate's percent per step, each held 2 s (the evidence decides how long)
MIN_DETECTABLE = 0.05  # the user's min_detectable_error_rate: each stage then needs ~155 requests
ANALYSIS = {"max_ttft_p95": None}
COHORTS = {"affinity": [{"header": "x-user-id"}]}


@dataclass
class Stage:
    """One step of the rollout: the candidate's weight, how long it lasted, and the most candidate
    requests the guard counted in it and first-token times the latency check compared, as status showed."""

    weight: int | None
    seconds: float
    candidate_requests: int
    ttft_samples: int


@dataclass
class AAOutcome:
    phase: str
    reason: str
    seconds: float  # from the first Locust user's start to the rollout's end
    stages: list[Stage]
    history: list[dict]
    misnamed: dict[tuple[str, str], int]  # (variant, the name its server gave itself) -> answers
    locust: dict = field(default_factory=dict)  # the Locust summary: requests, failures, variants

    @property
    def rolled_back(self) -> bool:
        return self.phase == "rolled_back" or any(t["target"] == "rolled_back" for t in self.history)

    def as_json(self) -> dict:
        return {
            "phase": self.phase,
            "reason": self.reason,
            "seconds_to_end": round(self.seconds, 1),
            "stages": [vars(stage) for stage in self.stages],
            "locust_requests": self.locust.get("requests"),
            "locust_failures": self.locust.get("failures"),
        }


def spec(cohorts: bool, steps: tuple[int, ...], min_detectable: float) -> dict:
    strategy = {"steps": [{"weight": w, "hold": "2s"} for w in steps[:-1]] + [{"weight": steps[-1]}]}
    analysis = {**ANALYSIS, "min_detectable_error_rate": min_detectable}
    return {"strategy": strategy, "analysis": analysis, **({"routing": COHORTS} if cohorts else {})}


def status(admin_url: str) -> dict:
    """The gateway's status as `graystack status --json` shows it, asked without starting a CLI each time."""
    return httpx.get(f"{admin_url}/v1/status", timeout=10).json()


def run_aa(
    tmp_path: Path,
    env: dict,
    weights: Path,
    cohorts: bool,
    limit: float,
    steps: tuple[int, ...] = STEPS,
    min_detectable: float = MIN_DETECTABLE,
) -> AAOutcome:
    """Start the servers and `up`, run Locust until the rollout ends (or `limit` seconds), and stop all.
    `min_detectable`: the spec's min_detectable_error_rate, which sets the evidence each stage needs."""
    servers = {name: start_model_server(name, "baseline", weights, tmp_path / "logs") for name in ("a", "b")}
    try:
        for server in servers.values():
            wait_ready(server)
        flags = [option for name, s in servers.items() for option in ("--upstream", f"{name}={s.url}")]
        up = running_up(
            tmp_path, env, spec(cohorts, steps, min_detectable), *flags, "--baseline", "a", "--no-prometheus"
        )
        process, state, _ = next(up)
        try:
            return _load_until_the_end(tmp_path / "locust", state, cohorts, limit)
        finally:
            process.send_signal(signal.SIGTERM)
            next(up, None)
    finally:
        for server in servers.values():
            server.process.stop()


def _load_until_the_end(run_dir: Path, state: dict, cohorts: bool, limit: float) -> AAOutcome:
    run_dir.mkdir(parents=True)
    admin = state["admin_url"]
    load = {
        "LOAD_SHAPE": "none",
        "LOADTEST_CONVERSATIONS": CONVERSATIONS if cohorts else "0",
    }
    argv = locust_command(
        run_dir, state["envoy_url"], None, ["--users", str(USERS), "--spawn-rate", str(USERS)]
    )
    locust = start_process("locust", [*argv, "--run-time", f"{int(limit) + 60}s"], run_dir, env=load)
    started, stages = time.monotonic(), StageClock()
    try:
        ended = wait_until(lambda: stages.see(status(admin)["rollout"]), limit, "the A/A rollout to end", 0.5)
    finally:
        locust.popen.send_signal(signal.SIGTERM)  # Locust writes its summary on the way out
        wait_for(locust, 60)
    seconds = time.monotonic() - started
    last = status(admin)
    return AAOutcome(
        phase=ended["phase"],
        reason=ended["reason"],
        seconds=seconds,
        stages=stages.stages,
        history=ended["history"],
        misnamed={(m["variant"], m["named"]): m["answers"] for m in last["misnamed"]},
        locust=_locust_totals(run_dir),
    )


class StageClock:
    """Follows the rollout's status: a Stage per step it left, closed at the step's last sighting."""

    def __init__(self) -> None:
        self.stages: list[Stage] = []
        self._step: tuple[int, int | None] | None = None
        self._since = time.monotonic()
        self._requests = 0
        self._ttft_samples = 0

    def see(self, rollout: dict) -> dict | None:
        """The rollout once it has ended (promoted or rolled back; the stage it ended in is closed too),
        else None."""
        if rollout["phase"] in ("promoted", "rolled_back"):
            if self._step is not None:
                self._close()
            return rollout
        step = (rollout["step"], rollout["weight"])
        if step != self._step:
            if self._step is not None:
                self._close()
            self._step, self._since = step, time.monotonic()
        evidence = rollout.get("evidence") or {}
        self._requests = max(self._requests, evidence.get("stage_requests", 0))
        checks = (rollout.get("last_decision") or {}).get("checks", [])
        ttft = [c["samples"] for c in checks if c["name"] == "ttft_vs_baseline"]
        self._ttft_samples = max([self._ttft_samples, *ttft])
        return None

    def _close(self) -> None:
        assert self._step is not None
        seconds = round(time.monotonic() - self._since, 1)
        self.stages.append(Stage(self._step[1], seconds, self._requests, self._ttft_samples))
        self._requests = self._ttft_samples = 0


def _locust_totals(run_dir: Path) -> dict:
    """Requests and failures of the run's `/v1/messages` rows, and the variants the clients saw."""
    with (run_dir / "locust_stats.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row["Name"] == "/v1/messages"]
    summary = (
        json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    )
    return {
        "requests": sum(int(row["Request Count"]) for row in rows),
        "failures": sum(int(row["Failure Count"]) for row in rows),
        "variants": sorted(v["variant"] for v in summary.get("variants", [])),
    }


def clean_env(tmp_path: Path) -> dict:
    """The environment `up` and the CLI run in: the test's own run-state file, no inherited admin URL."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GRAYSTACK_ADMIN_URL", "GRAYSTACK_SPEC")}
    return {**clean, "GRAYSTACK_RUN_STATE": str(tmp_path / "state" / "up.json")}
