"""What the rollout controller asks of a metrics source, whichever it is."""

from __future__ import annotations

from typing import Protocol

from gateway.rollout.analysis import Observations


class MetricsProvider(Protocol):
    async def observe(self, window_seconds: float, recent_seconds: float | None = None) -> Observations:
        """Each variant over the last `window_seconds`, with its requests and errors over the last
        `recent_seconds` too (0 without it).

        Never raises: a failure to measure (target down, bad answer) comes back as
        `Observations(error=...)` naming what failed, so the analysis can say `error`, which has its
        own policy (retry, then freeze or roll back), rather than crash the controller.
        """
        ...
