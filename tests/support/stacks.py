"""Running a local stack in a test: started, yielded, stopped, and every process checked gone by PID."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from graystack.local.rollout_stack import RolloutStack

Stack = TypeVar("Stack", bound=RolloutStack)


def running(stack: Stack) -> Iterator[Stack]:
    """For fixtures: `yield from running(RolloutStack(...))`."""
    try:
        yield stack.start()
    finally:
        stack.stop()
        for process in stack.processes():
            assert process is None or not process.alive(), f"{process.name} (pid {process.pid}) left running"
