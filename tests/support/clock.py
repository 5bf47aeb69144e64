"""A clock a test moves by hand, for the pure cores that take one injected (`clock: Callable[[], float]`)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
