"""The prometheus provider's built-in PromQL, by name, and the check of the spec's overrides of it
(`analysis.provider.queries`); the latency signals `analysis.provider.histograms` names.

Here, in the spec, because the spec names what it may override: the spec checks its overrides without
importing a provider (the CLI validates specs without the gateway's I/O), and the provider
(gateway/metrics/prometheus.py) reads the same table.

Each counter query selects raw series, one sample per series as it stands (no `increase()`, no
`sum()`): the analysis takes increments between looks series by series, so a restarted process's
series (its value falls) is a reset of that series alone. Placeholders: `{variant}`,
`{route_cluster}` (the aggregate `<variant>-with-fallback`, or the variant itself),
`{shadow_cluster}` (`<variant>-shadow`, where mirrored copies go) and `{fallback_routes}` (for the
fallback variant, the other variants' aggregates as a regex alternation); PromQL's own braces need no
escaping. What each counter means, and why: gateway/metrics/direct.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from gateway.families import (
    ENVOY_UPSTREAM_RQ,
    ENVOY_UPSTREAM_RQ_PENDING_FAILURE_EJECT,
    ENVOY_UPSTREAM_RQ_RETRY,
    ENVOY_UPSTREAM_RQ_RETRY_LIMIT_EXCEEDED,
    ENVOY_UPSTREAM_RQ_RETRY_SUCCESS,
    ENVOY_UPSTREAM_RQ_TOTAL,
)
from inference.families import (
    MODEL_INFO,
    PROBE_SERVER_MISMATCH,
    PROBE_TTFT,
    PROBE_WEIGHT_STATUS,
    REQUEST_TIME_PER_OUTPUT_TOKEN,
    REQUEST_TTFT,
    SHADOW_COMPARISONS,
    TOKENS,
    VLLM_GENERATION_TOKENS,
    VLLM_TIME_PER_OUTPUT_TOKEN,
    VLLM_TTFT,
)

LatencySignal = Literal["ttft", "itl"]  # TTFT, ITL: what a spec's provider.histograms names
# The segment of the probes' own TTFT histogram (their synthetic requests, straight to a pod): the queries
# below give it, the direct provider too, and the analysis keeps it apart (gateway/rollout/evidence.py).
PROBED = "(probe)"
VARIANT = '{variant="{variant}"}'  # PromQL's braces: the `{variant}` placeholder inside a label matcher


def _metric_in(*metrics: str, matchers: str = 'variant="{variant}"') -> str:
    """A selector of the series whose metric is any of `metrics`."""
    return '{__name__=~"' + "|".join(metrics) + '",' + matchers + "}"


def _probed(metric: str) -> str:
    """The probes' synthetic requests' `metric`, in a segment of its own."""
    return f'label_replace({metric}{VARIANT}, "segment", "{PROBED}", "", "")'


QUERIES: dict[str, str] = {
    "attempts": ENVOY_UPSTREAM_RQ_TOTAL + '{envoy_cluster_name=~"{variant}|{shadow_cluster}"}',
    "refused": ENVOY_UPSTREAM_RQ_PENDING_FAILURE_EJECT + '{envoy_cluster_name=~"{variant}|{shadow_cluster}"}',
    "retried": ENVOY_UPSTREAM_RQ_RETRY + '{envoy_cluster_name="{route_cluster}"}',
    # with one retry, each failed attempt once (gateway/metrics/direct.py): in place of `retried`, a
    # variant behind its fallback aggregate counts the failures its fallback rescued, and the fallback
    # variant the fallbacks that failed on the others' behalf
    "rescued": ENVOY_UPSTREAM_RQ_RETRY_SUCCESS + '{envoy_cluster_name="{route_cluster}"}',
    "fallbacks_failed": ENVOY_UPSTREAM_RQ_RETRY_LIMIT_EXCEEDED + '{envoy_cluster_name=~"{fallback_routes}"}',
    "failed": (
        ENVOY_UPSTREAM_RQ
        + '{envoy_cluster_name=~"{route_cluster}|{shadow_cluster}",envoy_response_code=~"5.."}'
    ),
    # graystack's servers' histograms, or vLLM's (a scrape config labels a vLLM pod's series with its variant)
    "ttft": _metric_in(f"{REQUEST_TTFT}_bucket", f"{VLLM_TTFT}_bucket"),
    "ttft_sum": _metric_in(f"{REQUEST_TTFT}_sum", f"{VLLM_TTFT}_sum"),
    "itl": _metric_in(f"{REQUEST_TIME_PER_OUTPUT_TOKEN}_bucket", f"{VLLM_TIME_PER_OUTPUT_TOKEN}_bucket"),
    "itl_sum": _metric_in(f"{REQUEST_TIME_PER_OUTPUT_TOKEN}_sum", f"{VLLM_TIME_PER_OUTPUT_TOKEN}_sum"),
    # the probes' synthetic requests, in a stratum of their own (compared where the servers have no TTFT)
    "probe_ttft": _probed(f"{PROBE_TTFT}_bucket"),
    "probe_ttft_sum": _probed(f"{PROBE_TTFT}_sum"),
    "compared": SHADOW_COMPARISONS + '{variant="{variant}",result=~"agree|differ"}',
    "differed": SHADOW_COMPARISONS + '{variant="{variant}",result="differ"}',
    # tokens generated, for what a variant's pods cost per million of them (graystack status)
    "generated": _metric_in(
        TOKENS, VLLM_GENERATION_TOKENS, matchers='variant="{variant}",kind=~"generated|"'
    ),
    "weight_status": f"{PROBE_WEIGHT_STATUS}{VARIANT} == 1",
    "server_mismatch": f"{PROBE_SERVER_MISMATCH}{VARIANT} == 1",
    "effective_window": f"{MODEL_INFO}{VARIANT} == 1",
}
PLACEHOLDERS = frozenset({"variant", "route_cluster", "shadow_cluster", "fallback_routes"})
PLACEHOLDER = re.compile(r"\{(\w+)\}")  # `{name}`: never valid PromQL, whose braces hold label matchers


def check_overrides(queries: Mapping[str, str]) -> None:
    """ValueError naming the first override that is not a known query or uses an unknown placeholder."""
    for name, template in queries.items():
        if name not in QUERIES:
            raise ValueError(
                f"unknown query {name!r}; the prometheus provider's queries are {sorted(QUERIES)}"
            )
        used = set(PLACEHOLDER.findall(template))
        if "window" in used:
            raise ValueError(
                f"query {name!r}: `{{window}}` is no longer filled in: select the raw cumulative series "
                "(no increase(), no sum()); the analysis takes their increments between looks"
            )
        unknown = sorted(used - PLACEHOLDERS)
        if unknown:
            raise ValueError(f"query {name!r}: unknown placeholder(s) {unknown}; use {sorted(PLACEHOLDERS)}")
