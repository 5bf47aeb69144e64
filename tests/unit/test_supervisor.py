"""What `graystack up` checks before it starts anything, and the run-state lock that keeps a second
`up` from starting beside a running one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from graystack.local import rollout_stack, supervisor
from graystack.local.processes import StartupError
from graystack.local.run_state import AlreadyRunning, RunState, running_stack
from graystack.local.supervisor import Supervisor, UpOptions, local_spec


def test_a_busy_well_known_port_is_named_with_its_purpose_and_the_way_out(tmp_path, monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setattr(supervisor, "DEFAULT_PORTS", {"admin": port})
        with pytest.raises(StartupError) as error:
            Supervisor(UpOptions(tmp_path, {}))._well_known_ports({"admin", "listen"})
    assert f"{port} (the gateway's admin API)" in str(error.value)
    assert "graystack up --free-ports" in str(error.value)


def test_only_the_ports_of_processes_up_starts_are_checked(tmp_path, monkeypatch):
    """In front of the user's servers (`--upstream`), their ports, busy by design, are not `up`'s."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setattr(supervisor, "DEFAULT_PORTS", {"baseline": port, "admin": 1})
        assert Supervisor(UpOptions(tmp_path, {}))._well_known_ports({"admin"}) == {"admin": 1}


def test_a_second_holder_of_the_run_state_is_refused_with_who_holds_it(tmp_path):
    first = RunState(tmp_path / "up.json")
    first.acquire()
    first.write(
        {"pid": os.getpid(), "ready": True, "admin_url": "http://127.0.0.1:9000", "run_dir": "runs/x"}
    )
    with pytest.raises(AlreadyRunning) as error:
        RunState(tmp_path / "up.json").acquire()
    assert f"supervisor pid {os.getpid()}, admin API http://127.0.0.1:9000, logs in runs/x" in str(
        error.value
    )
    first.release()
    assert not (tmp_path / "up.json").exists()
    RunState(tmp_path / "up.json").acquire()  # free again


def test_a_stale_state_file_from_a_dead_stack_is_ignored_and_taken_over(tmp_path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "up.json"
    monkeypatch.setenv("GRAYSTACK_RUN_STATE", str(path))
    stale = RunState()
    stale.write({"pid": dead.pid, "ready": True, "admin_url": "http://127.0.0.1:1"})
    assert running_stack() is None  # the CLI falls back to its default admin URL
    RunState().acquire()


def test_a_bad_spec_is_refused_before_anything_starts_naming_the_field():
    with pytest.raises(ValueError, match=r"analysis\.max_error_rate"):
        local_spec({"analysis": {"max_error_rate": 2}})
    assert local_spec({"variants": {"x": {}}, "analysis": {"interval": "1s"}}) == {
        "analysis": {"interval": "1s"}
    }


def test_a_zero_layer_checkpoint_the_guard_would_reject_is_refused_before_anything_starts(tmp_path):
    """An ACTIVE zero-layer (e.g. `make weights`' derived zero-layer.safetensors) under the default
    expectation (ERASED or ZEROED): the weight-status check would fail and roll back at once."""
    from inference.checkpoint import init_checkpoint

    weights = {
        v: init_checkpoint(v, tmp_path / f"{v}.safetensors", seed=1) for v in ("baseline", "zero-layer")
    }
    with pytest.raises(StartupError) as error:
        rollout_stack.check_checkpoints(weights, ["ERASED", "ZEROED"])
    assert "zero-layer.safetensors is ACTIVE" in str(error.value)
    assert "graystack weights erase" in str(error.value)
    rollout_stack.check_checkpoints(weights, ["ACTIVE"])  # what the spec expects: fine
