"""The guard's metrics provider: built from the spec's variants, source and whether cohorts are on
(clients are then the tests' unit, gateway/metrics/client_units.py), rebuilt when those change.

Without one (no metrics source, or a spec that names no baseline) the guard is off, and `off` says why:
status shows it, and no analysis runs (the strategy moves only by operator commands).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.metrics.provider import MetricsProvider
from gateway.rollout.plan import roles
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.quality import Quality
from gateway.spec.strategy import Provider

log = logging.getLogger(__name__)


class ProviderUnavailable(Exception):
    """No metrics source can be built for this spec; the message says why (shown in status)."""


ProviderFactory = Callable[[RolloutSpec], MetricsProvider]
# What the provider is built from: the variants, the fallback, the metrics source, cohorts on, quality.
_Key = tuple[tuple[str, ...], str | None, Provider, bool, Quality | None]


class Guard:
    def __init__(self, make_provider: ProviderFactory) -> None:
        self._make_provider = make_provider
        self._provider: MetricsProvider | None = None
        self._key: _Key | None = None
        self.off: str | None = None  # why the guard is off (None: it is on)

    def provider_for(self, spec: RolloutSpec) -> MetricsProvider | None:
        """The provider for this spec (None: the guard is off, and `off` says why)."""
        key = (
            tuple(spec.variants),
            spec.retries.fallback,
            spec.analysis.provider,
            bool(spec.routing.affinity),
            spec.analysis.quality,
        )
        if key != self._key:
            self._key = key
            self.close()
            try:
                roles(spec)
                self._provider, self.off = self._make_provider(spec), None
            except (ProviderUnavailable, SpecError) as error:
                self._provider, self.off = None, str(error)
                log.warning("rollout %s: the guard is off: %s", spec.name, error)
        return self._provider

    def close(self) -> None:
        """Close the provider (a spec change replaces it, or the controller stops)."""
        if self._provider is not None:
            self._provider.close()
            self._provider = None

    def new_count(self) -> None:
        """A new stage, or new tests: the provider forgets who it counted (client_units.py)."""
        if self._provider is not None:
            self._provider.new_count()
