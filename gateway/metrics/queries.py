"""The prometheus provider's PromQL, by name, and the check of the spec's overrides of it.

Its own module, importing nothing from gateway.rollout, so that the spec (gateway/spec/model.py)
can check `analysis.provider.queries` without importing a provider.

Each counter query selects raw series, one sample per series as it stands (no `increase()`, no
`sum()`): the analysis takes increments between looks series by series, so a restarted process's
series (its value falls) is a reset of that series alone. Placeholders: `{variant}`,
`{route_cluster}` (the aggregate `<variant>-with-fallback`, or the variant itself) and
`{shadow_cluster}` (`<variant>-shadow`, where mirrored copies go); PromQL's own braces need no
escaping. What each counter means, and why: gateway/metrics/direct.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gateway import names
from gateway.metrics.observations import (
    COMPARED,
    DIFFERED,
    ERRORS,
    GENERATED,
    ITL,
    ITL_SUM,
    PROBED,
    REQUESTS,
    TTFT,
    TTFT_SUM,
    LatencySignal,
)

QUERIES: dict[str, str] = {
    "attempts": 'envoy_cluster_upstream_rq_total{envoy_cluster_name=~"{variant}|{shadow_cluster}"}',
    "refused": 'envoy_cluster_upstream_rq_pending_failure_eject{envoy_cluster_name=~"{variant}|{shadow_cluster}"}',
    "retried": 'envoy_cluster_upstream_rq_retry{envoy_cluster_name="{route_cluster}"}',
    "failed": (
        'envoy_cluster_upstream_rq{envoy_cluster_name=~"{route_cluster}|{shadow_cluster}",envoy_response_code=~"5.."}'
    ),
    # graystack's servers' histograms, or vLLM's (a scrape config labels a vLLM pod's series with its variant)
    "ttft": '{__name__=~"graystack_request_ttft_seconds_bucket|vllm:time_to_first_token_seconds_bucket",variant="{variant}"}',
    "ttft_sum": '{__name__=~"graystack_request_ttft_seconds_sum|vllm:time_to_first_token_seconds_sum",variant="{variant}"}',
    "itl": '{__name__=~"graystack_request_time_per_output_token_seconds_bucket|vllm:request_time_per_output_token_seconds_bucket",variant="{variant}"}',
    "itl_sum": '{__name__=~"graystack_request_time_per_output_token_seconds_sum|vllm:request_time_per_output_token_seconds_sum",variant="{variant}"}',
    # the probes' synthetic requests, in a stratum of their own (compared where the servers have no TTFT)
    "probe_ttft": 'label_replace(graystack_probe_ttft_seconds_bucket{variant="{variant}"}, "segment", "'
    + PROBED
    + '", "", "")',
    "probe_ttft_sum": 'label_replace(graystack_probe_ttft_seconds_sum{variant="{variant}"}, "segment", "'
    + PROBED
    + '", "", "")',
    "compared": 'graystack_shadow_comparisons_total{variant="{variant}",result=~"agree|differ"}',
    "differed": 'graystack_shadow_comparisons_total{variant="{variant}",result="differ"}',
    # tokens generated, for what a variant's pods cost per million of them (graystack status)
    "generated": (
        '{__name__=~"graystack_tokens_total|vllm:generation_tokens_total",variant="{variant}",kind=~"generated|"}'
    ),
    "weight_status": 'graystack_probe_weight_status{variant="{variant}"} == 1',
    "server_mismatch": 'graystack_probe_server_mismatch{variant="{variant}"} == 1',
    "effective_window": 'graystack_model_info{variant="{variant}"} == 1',
}
# The counter queries' signals: several queries may feed one signal (the consumer sums increments).
SIGNALS: dict[str, str] = {
    "attempts": REQUESTS,
    "refused": REQUESTS,
    "retried": ERRORS,
    "failed": ERRORS,
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
PLACEHOLDERS = frozenset({"variant", "route_cluster", "shadow_cluster"})
_PLACEHOLDER = re.compile(r"\{(\w+)\}")  # `{name}`: never valid PromQL, whose braces hold label matchers


def histogram_queries(histograms: Mapping[LatencySignal, str]) -> dict[str, str]:
    """The latency queries for the spec's named histograms (`provider.histograms`: `ttft`, `itl`)."""
    return {
        f"{signal}{suffix}": f'{base}{suffix or "_bucket"}{{variant="{{variant}}"}}'
        for signal, base in histograms.items()
        for suffix in ("", "_sum")
    }


def check_overrides(queries: Mapping[str, str]) -> None:
    """ValueError naming the first override that is not a known query or uses an unknown placeholder."""
    for name, template in queries.items():
        if name not in QUERIES:
            raise ValueError(
                f"unknown query {name!r}; the prometheus provider's queries are {sorted(QUERIES)}"
            )
        used = set(_PLACEHOLDER.findall(template))
        if "window" in used:
            raise ValueError(
                f"query {name!r}: `{{window}}` is no longer filled in: select the raw cumulative series "
                "(no increase(), no sum()); the analysis takes their increments between looks"
            )
        unknown = sorted(used - PLACEHOLDERS)
        if unknown:
            raise ValueError(f"query {name!r}: unknown placeholder(s) {unknown}; use {sorted(PLACEHOLDERS)}")


def render(template: str, variant: str, route_cluster: str) -> str:
    values = {
        "variant": variant,
        "route_cluster": route_cluster,
        "shadow_cluster": names.shadow_cluster(variant),
    }
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), template)
