"""How a provider turns one counter series it read into a `CounterKey`, the same way for both providers.

A series is told apart by its metric name and all its labels (the target or Prometheus `instance`
among them), so two pods' series, or two Envoy replicas', never merge, and a restarted process's
series keeps its name: its value falls, which the consumer reads as a reset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gateway import names
from gateway.metrics.observations import ITL, ITL_SUM, TTFT, TTFT_SUM, CounterKey, stratum

LATENCY = frozenset({TTFT, TTFT_SUM, ITL, ITL_SUM})  # the model servers' histograms, stratified
NAME = "__name__"  # how Prometheus names a series' metric among its labels


def source(name: str, labels: Mapping[str, str]) -> str:
    """`name{label="value",...}`, labels sorted by name: what a series is, as PromQL writes it."""
    pairs = ",".join(f'{label}="{value}"' for label, value in sorted(labels.items()) if label != NAME)
    return f"{name}{{{pairs}}}"


def counter_key(variant: str, signal: str, name: str, labels: Mapping[str, str]) -> CounterKey:
    """The key of series `name{labels}` counted as `variant`'s `signal`: a latency histogram's stratum
    from its `segment` and `prompt_bucket` labels (observations.stratum) and its pod from `instance`,
    its bucket bound from `le` (a plain counter's is +Inf); ValueError naming the series where `le` is
    not a number."""
    named = source(name, labels)
    try:
        le = float(labels["le"]) if "le" in labels else math.inf
    except ValueError:
        raise ValueError(f"{named}: its `le` is not a number") from None
    if signal not in LATENCY:
        return CounterKey(variant=variant, signal=signal, le=le, source=named)
    where = stratum(labels.get("segment"), labels.get("prompt_bucket", ""))
    return CounterKey(variant, signal, where, le, named, labels.get("instance", ""))


def route_cluster(variant: str, fallback: str | None) -> str:
    """The cluster the route names for `variant` (gateway/envoy/resources.py `cluster_for`): its
    fallback aggregate `<variant>-with-fallback`, or the variant itself without a fallback and for
    the fallback variant."""
    if fallback is None or variant == fallback:
        return variant
    return names.fallback_cluster(variant)


def charged_once(variant: str, fallback: str | None, attempts: int) -> bool:
    """Whether `variant`'s failures are read each once, as its own (gateway/metrics/direct.py): it is
    reached through its fallback aggregate and a failed attempt is retried once, on the fallback."""
    return attempts == 1 and route_cluster(variant, fallback) != variant


def fallback_routes(variant: str, variants: Sequence[str], fallback: str | None, attempts: int) -> list[str]:
    """The aggregates whose failed fallback attempts are `variant`'s own (it is the fallback), each once."""
    if variant != fallback:
        return []
    return [route_cluster(other, fallback) for other in variants if charged_once(other, fallback, attempts)]
