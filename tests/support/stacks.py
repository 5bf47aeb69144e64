"""Running a local stack in a test: started, yielded, stopped, and every process checked gone by PID."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from graystack.local.gateway_stack import GatewayStack

Stack = TypeVar("Stack", bound=GatewayStack)


def running(stack: Stack) -> Iterator[Stack]:
    """For fixtures: `yield from running(RolloutStack(...))` (or `for started in running(...):` with
    more set-up before its `yield started`)."""
    try:
        yield stack.start()
    finally:
        stack.stop()
        for process in stack.processes():
            assert process is None or not process.alive(), f"{process.name} (pid {process.pid}) left running"
