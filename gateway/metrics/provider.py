"""What the rollout controller asks of a metrics source, whichever it is."""

from __future__ import annotations

from typing import Protocol

from gateway.metrics.observations import Observations


class MetricsProvider(Protocol):
    async def observe(self) -> Observations:
        """Every cumulative counter series the provider reads, as it stands now, each its own entry
        (gateway/metrics/observations.py), with the probes' weight statuses and the model servers'
        effective windows. Stateless: the analysis takes increments between two looks, series by
        series, and reads a series that fell as a restart.

        Never raises: a failure to measure (target down, bad answer) comes back as
        `Observations(error=...)` naming what failed, so the analysis can say `error`, which has its
        own policy (retry, then freeze or roll back), rather than crash the controller.
        """
        ...

    def new_count(self) -> None:
        """A new count began (the rollout moved to another stage, or its tests started over): forget
        who was counted (the clients, gateway/metrics/client_units.py). Stateless providers do nothing."""
        ...

    def close(self) -> None:
        """Stop what it runs in the background (the judge's calls): it is being replaced (a spec change)
        or the controller stops. Providers that run nothing do nothing."""
        ...
