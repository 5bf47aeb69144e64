"""The Variants dashboard's capacity row: each variant's pods as the gateway's capacity plan sees them, and
what its GPUs cost per million generated tokens.

Both read gauges that only the leading gateway exports, in Kubernetes with `rollout.capacity` enabled
(gateway/rollout/telemetry.py): elsewhere these panels are empty.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import timeseries

from gateway.families import VARIANT_COST_PER_HOUR, VARIANT_REPLICAS
from graystack.observability.dashboards.panels import graph, query
from graystack.observability.promql import NAMESPACE, RATE, ROLLOUT_VARIANT
from inference.families import TOKENS, VLLM_GENERATION_TOKENS

# Generated tokens, whichever server counts them: graystack's model servers count both kinds in one
# family (`kind` prompt or generated), vLLM counts generated ones in its own family without `kind` (a
# scrape config labels its series with the variant). A pod exports one of the two, so the sum counts
# each token once.
GENERATED_TOKENS = (
    f'{{__name__=~"{TOKENS}|{VLLM_GENERATION_TOKENS}", {NAMESPACE}, variant=~"$variant", kind=~"generated|"}}'
)
TOKENS_PER_HOUR = f"sum by (namespace, variant) (rate({GENERATED_TOKENS}[{RATE}])) * 3600"
COST_PER_HOUR = f"sum by (namespace, variant) ({VARIANT_COST_PER_HOUR}{{{ROLLOUT_VARIANT}}})"
SOURCE = (
    " From the leading gateway, in Kubernetes with rollout.capacity enabled in the chart's values; "
    "empty without it."
)


def pods() -> timeseries.Panel:
    return graph(
        "Pods per variant: wanted, running, ready",
        "short",
        "wanted: what the capacity plan set for the variant's share of the split (its Deployment's "
        "replicas, or its HPA's minReplicas). running: pods that exist and hold their GPUs, ready or "
        "not. ready: pods that serve. running below wanted is pods that cannot be scheduled (GPU "
        "quota, no GPU node: the Deployment's events say which); ready below running is pods starting "
        "or crashing. A step waits for its candidate's ready pods." + SOURCE,
        query(f"{VARIANT_REPLICAS}{{{ROLLOUT_VARIANT}}}", "{{variant}} {{state}}"),
    )


def cost_per_million_tokens() -> timeseries.Panel:
    """Running pods' GPU-hours over the tokens they generated in that hour: what a variant costs to serve
    the share of the traffic it has now (idle GPUs included)."""
    return graph(
        "Cost per million generated tokens",
        "none",
        "The variant's GPU cost per hour (running pods x GPUs per pod x the per-GPU-hour price set in "
        "rollout.capacity) over the tokens it generates per hour (graystack's and vLLM's counters; "
        "prompt tokens not counted), per million tokens, in the price's currency. It falls as a "
        "variant's pods fill up; no line while a variant generates nothing." + SOURCE,
        query(f"{COST_PER_HOUR} / ({TOKENS_PER_HOUR} > 0) * 1e6", "{{variant}}"),
    ).decimals(2)
