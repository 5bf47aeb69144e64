"""A metrics provider stand-in for unit tests: cumulative counters that grow by scripted per-look traffic.

It reports what the real providers report (gateway/metrics/observations.py): every counter series as it
stands, so the controller takes increments exactly as it does from Envoy and the model servers; and, as
the gateway's answer measurement adds (gateway/metrics/answered.py), each served request's exact TTFT
and time per output token since the last look.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.metrics.observations import (
    COMPARED,
    DIFFERED,
    ERRORS,
    GENERATED,
    ITL,
    ITL_SUM,
    REQUESTS,
    TTFT,
    TTFT_SUM,
    CounterKey,
    Observations,
    SampleKey,
    stratum,
)
from gateway.spec.queries import PROBED
from inference.server.telemetry import INTER_TOKEN_BUCKETS, TTFT_BUCKETS


@dataclass(frozen=True)
class Traffic:
    """One variant's traffic in one look: requests, errors, and every request's latencies."""

    requests: int = 0
    errors: int = 0
    ttft: float = 0.05  # seconds, every request's first token
    itl: float = 0.02  # seconds between its tokens (one gap per request)
    segment: str = "default"
    prompt_bucket: str = "0-128"
    compared: int = 0
    differed: int = 0
    generated: int = 0  # tokens


@dataclass
class CountingProvider:
    """`observe()` adds `per_look` (variant -> Traffic, or a list of them) to the counters and reports
    them; `error` makes a look unreadable (nothing is added); `restart(variant)` zeroes a variant's
    series, as a restarted process does."""

    per_look: Mapping[str, Traffic | Sequence[Traffic]] = field(default_factory=dict)
    weight_status: Mapping[str, Sequence[str]] = field(default_factory=lambda: {"zero-layer": ["ERASED"]})
    mismatches: Mapping[str, Sequence[str]] = field(default_factory=dict)
    error: str | None = None
    counters: dict[CounterKey, float] = field(default_factory=lambda: defaultdict(float))
    looks: int = 0
    counts_started: int = 0  # new_count() calls: a new stage, or new tests
    closed: bool = False  # close() was called: the guard replaced it, or the controller stopped

    def new_count(self) -> None:
        self.counts_started += 1

    def close(self) -> None:
        self.closed = True

    async def observe(self) -> Observations:
        if self.error is not None:
            return Observations(error=self.error)
        self.looks += 1
        samples: dict[SampleKey, list[float]] = defaultdict(list)
        for variant, traffic in self.per_look.items():
            for one in [traffic] if isinstance(traffic, Traffic) else traffic:
                self._add(variant, one, samples)
        return Observations(
            counters=dict(self.counters),
            weight_status=dict(self.weight_status),
            mismatches=dict(self.mismatches),
            samples={key: tuple(values) for key, values in samples.items()},
        )

    def restart(self, variant: str) -> None:
        for key in [k for k in self.counters if k.variant == variant]:
            self.counters[key] = 0.0

    def _add(self, variant: str, traffic: Traffic, samples: dict[SampleKey, list[float]]) -> None:
        add = self.counters
        add[CounterKey(variant, REQUESTS, source="envoy")] += traffic.requests
        add[CounterKey(variant, ERRORS, source="envoy")] += traffic.errors
        add[CounterKey(variant, COMPARED, source="pod")] += traffic.compared
        add[CounterKey(variant, DIFFERED, source="pod")] += traffic.differed
        add[CounterKey(variant, GENERATED, source="pod")] += traffic.generated
        served = traffic.requests - traffic.errors
        ttft_stratum = stratum(traffic.segment, traffic.prompt_bucket)
        itl_stratum = stratum(traffic.segment)
        for signal, total, edges, value, where in (
            (TTFT, TTFT_SUM, TTFT_BUCKETS, traffic.ttft, ttft_stratum),
            (ITL, ITL_SUM, INTER_TOKEN_BUCKETS, traffic.itl, itl_stratum),
        ):
            pod = f"{variant}-pod"
            for edge in (*edges, math.inf):
                add[CounterKey(variant, signal, where, edge, pod, pod)] += served if value <= edge else 0
            add[CounterKey(variant, total, where, math.inf, pod, pod)] += served * value
            if traffic.segment != PROBED:  # the probes' requests do not pass Envoy: no answer measured
                samples[SampleKey(variant, signal, where)] += [value] * served
