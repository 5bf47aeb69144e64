"""What only tests need on top of graystack.local.processes."""

from __future__ import annotations

import os
import signal
from typing import NoReturn

import pytest

from graystack.binaries import find_binary
from graystack.local.processes import ManagedProcess


def unavailable(message: str) -> NoReturn:
    """Skips the test where something it needs is absent, fails under CI (a green CI means it ran)."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_binary(name: str, why: str, provided_by: str = "make install") -> str:
    """The binary's path; `unavailable` where it is absent."""
    path = find_binary(name)
    if path is None:
        unavailable(f"`{name}` not found on PATH ({why}); `{provided_by}` provides it")
    return path


def kill_hard(process: ManagedProcess) -> None:
    """SIGKILL: a crash, not a shutdown."""
    if process.alive():
        os.kill(process.pid, signal.SIGKILL)
        process.popen.wait(timeout=10)
