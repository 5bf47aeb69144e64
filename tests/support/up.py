"""`graystack up` as a user runs it, for the tests that drive it: a background process whose run-state
file is all the CLI goes by, always stopped (SIGTERM, then SIGKILL as a last resort)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from graystack.local.processes import wait_until


def graystack(env: dict, *args: str) -> subprocess.CompletedProcess:
    """The CLI as an operator runs it: no --admin-url, only the run-state file to go by."""
    return subprocess.run(
        [sys.executable, "-m", "graystack", *args], capture_output=True, text=True, timeout=60, env=env
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def running_up(tmp_path: Path, env: dict, spec_changes: dict, *options: str):
    """`graystack up` running, and its run state once ready; always stopped (SIGKILL as a last resort)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_changes))
    argv = [sys.executable, "-m", "graystack", "up", "--free-ports", "--spec", str(spec), *options]
    log = (tmp_path / "up.out").open("w")
    process = subprocess.Popen(
        [*argv, "--run-dir", str(tmp_path / "run")], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    state_path = Path(env["GRAYSTACK_RUN_STATE"])

    def ready() -> dict | None:
        if process.poll() is not None:
            return {"exited": process.returncode}  # a truthy answer: no point waiting on
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        return state if state.get("ready") else None

    try:
        state = wait_until(ready, 180, "graystack up to report the stack ready", interval=0.5)
        assert "exited" not in state, (tmp_path / "up.out").read_text()
        yield process, state, tmp_path / "up.out"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()
