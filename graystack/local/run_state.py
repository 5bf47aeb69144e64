"""Where a running `graystack up` says what it started: a small JSON file (ports, URLs, PIDs, run folder)
in a well-known place, so that `graystack status|weight|promote|...` find the stack without flags, and a
lock beside it, so that a second `up` refuses while one runs.

The lock is an flock on `up.lock`, held by the supervisor for its lifetime: the kernel drops it when the
process dies, however it dies, so a stale state file from a dead stack is simply taken over.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

ENV_VAR = "GRAYSTACK_RUN_STATE"


def default_path() -> Path:
    """$GRAYSTACK_RUN_STATE, else $XDG_RUNTIME_DIR/graystack/up.json, else /tmp/graystack-UID/up.json."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = (
        Path(runtime) / "graystack" if runtime else Path(tempfile.gettempdir()) / f"graystack-{os.getuid()}"
    )
    return base / "up.json"


class AlreadyRunning(RuntimeError):
    """Another `graystack up` holds the lock; the message says which and how to stop it."""


class RunState:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self.lock_path = self.path.with_suffix(".lock")
        self._lock: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock, or AlreadyRunning describing the stack that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = self.lock_path.open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            running = self.read() or {}
            pid = running.get("pid", "?")
            raise AlreadyRunning(
                f"a graystack stack is already running (supervisor pid {pid}, admin API "
                f"{running.get('admin_url', '?')}, logs in {running.get('run_dir', '?')}); "
                f"stop it first (Ctrl-C in its terminal, or `kill {pid}`), or point this one elsewhere "
                f"with {ENV_VAR}=FILE"
            ) from None
        self._lock = lock

    def write(self, state: dict[str, Any]) -> None:
        """Replace the file atomically (a reader never sees half of it)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.path)

    def read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        """Remove the state file and drop the lock, if held (the lock file stays: removing it would race)."""
        if self._lock is None:
            return
        self.path.unlink(missing_ok=True)
        self._lock.close()
        self._lock = None


def running_stack() -> dict[str, Any] | None:
    """The state of the `up` stack running now, or None (no file, or its supervisor is gone)."""
    state = RunState().read()
    if not state or not state.get("ready") or not _alive(state.get("pid")):
        return None
    return state


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
