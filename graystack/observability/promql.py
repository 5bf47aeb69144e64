"""The dashboards' label selectors and query shapes.

In a cluster Prometheus adds a `namespace` label to every series; the local stack's series have none.
The `namespace` variable's "All" is `.*`, which also matches a label that is absent, so the same
queries work in both places.
"""

from __future__ import annotations

from inference.families import MODEL_INFO

NAMESPACE = 'namespace=~"$namespace"'
ROLLOUT = f'{NAMESPACE}, rollout=~"$rollout"'
VARIANT = f'{NAMESPACE}, variant=~"$variant"'
ROLLOUT_VARIANT = f'{ROLLOUT}, variant=~"$variant"'  # the gateway's per-variant series carry both
# Envoy names a cluster after its variant; the route names `<variant>-with-fallback` when a failed
# attempt may retry on the fallback variant (gateway/names.py).
ROUTE_CLUSTER = f'{NAMESPACE}, envoy_cluster_name=~"($variant)(-with-fallback)?"'
# Mirrored copies of a shadow phase go to `<variant>-shadow`, never to the variant's own cluster.
SHADOW_CLUSTER = f'{NAMESPACE}, envoy_cluster_name=~"($variant)-shadow"'
RATE = "$__rate_interval"
# The model servers' process_* series carry no `variant`: their pod's graystack_model_info names it.
SERVER_VARIANT = (
    "on (namespace, job, instance) group_left (variant) "
    f"group by (namespace, job, instance, variant) ({MODEL_INFO}{{{VARIANT}}})"
)


def quantile(q: float, histogram: str, selector: str, by: str, window: str = RATE) -> str:
    """The q-quantile of a histogram family's recent observations, one series per `by` group."""
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({histogram}_bucket{{{selector}}}[{window}])))"


def rate(counter: str, selector: str, by: str, window: str = RATE) -> str:
    return f"sum by ({by}) (rate({counter}{{{selector}}}[{window}]))"
