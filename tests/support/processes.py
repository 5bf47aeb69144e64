"""What only tests need on top of graystack.local.processes."""

from __future__ import annotations

import os

import pytest

from graystack.binaries import find_binary


def require_binary(name: str, why: str, provided_by: str = "make install") -> str:
    """The binary's path; skips the test where it is absent, fails under CI (a green CI means it ran)."""
    path = find_binary(name)
    if path is None:
        message = f"`{name}` not found on PATH ({why}); `{provided_by}` provides it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
