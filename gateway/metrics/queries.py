"""The prometheus provider's side of its queries: which signal each counter query feeds, the queries for
a spec's named histograms, and a template filled in for one variant.

The built-in queries themselves, their placeholders and the check of a spec's overrides are the spec's
(gateway/spec/queries.py), which names what it may override.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway import names
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
)
from gateway.spec.queries import PLACEHOLDER, LatencySignal

# The counter queries' signals: several queries may feed one signal (the consumer sums increments).
SIGNALS: dict[str, str] = {
    "attempts": REQUESTS,
    "refused": REQUESTS,
    "retried": ERRORS,
    "failed": ERRORS,
    "rescued": ERRORS,
    "fallbacks_failed": ERRORS,
    "ttft": TTFT,
    "ttft_sum": TTFT_SUM,
    "itl": ITL,
    "itl_sum": ITL_SUM,
    "probe_ttft": TTFT,
    "probe_ttft_sum": TTFT_SUM,
    "compared": COMPARED,
    "differed": DIFFERED,
    "generated": GENERATED,
}
BUCKETS = frozenset({"ttft", "itl", "probe_ttft"})  # histogram buckets: each series must keep its `le` label


def histogram_queries(histograms: Mapping[LatencySignal, str]) -> dict[str, str]:
    """The latency queries for the spec's named histograms (`provider.histograms`: `ttft`, `itl`)."""
    return {
        f"{signal}{suffix}": f'{base}{suffix or "_bucket"}{{variant="{{variant}}"}}'
        for signal, base in histograms.items()
        for suffix in ("", "_sum")
    }


def render(template: str, variant: str, route_cluster: str, fallback_routes: Sequence[str] = ()) -> str:
    values = {
        "variant": variant,
        "route_cluster": route_cluster,
        "shadow_cluster": names.shadow_cluster(variant),
        "fallback_routes": "|".join(fallback_routes),
    }
    return PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), template)
