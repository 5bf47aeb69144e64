"""The Variants dashboard's capacity row: each variant's pods as the gateway's capacity plan sees them, and
what its GPUs cost per million output tokens (any server: the gateway counts them).

Both read gauges that only the leading gateway exports, in Kubernetes with `rollout.capacity` enabled
(gateway/rollout/telemetry.py): elsewhere these panels are empty.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import timeseries

from gateway.families import GEN_AI_TOKEN_USAGE, VARIANT_COST_PER_HOUR, VARIANT_REPLICAS
from graystack.observability.dashboards.panels import graph, query
from graystack.observability.promql import NAMESPACE, RATE, ROLLOUT_VARIANT

# Output tokens as the gateway measured every answer (the server's `usage`, else its content events
# counted), so any server has a cost figure; mirrored shadow copies are not measured.
OUTPUT_TOKENS = f'{GEN_AI_TOKEN_USAGE}_sum{{{NAMESPACE}, variant=~"$variant", gen_ai_token_type="output"}}'
TOKENS_PER_HOUR = f"sum by (namespace, variant) (rate({OUTPUT_TOKENS}[{RATE}])) * 3600"
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
        "Cost per million output tokens",
        "none",
        "The variant's GPU cost per hour (running pods x GPUs per pod x the per-GPU-hour price set in "
        "rollout.capacity) over the output tokens it served per hour (as the gateway measured every "
        "answer, for any server; prompt tokens and shadow copies not counted), per million tokens, in the price's currency. It falls as a "
        "variant's pods fill up; no line while a variant generates nothing." + SOURCE,
        query(f"{COST_PER_HOUR} / ({TOKENS_PER_HOUR} > 0) * 1e6", "{{variant}}"),
    ).decimals(2)
