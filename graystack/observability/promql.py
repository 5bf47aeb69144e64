"""The dashboards' label selectors and query shapes.

In a cluster Prometheus adds a `namespace` label to every series; the local stack's series have none.
The `namespace` variable's "All" is `.*`, which also matches a label that is absent, so the same
queries work in both places.
"""

from __future__ import annotations

NAMESPACE = 'namespace=~"$namespace"'
ROLLOUT = f'{NAMESPACE}, rollout=~"$rollout"'
VARIANT = f'{NAMESPACE}, variant=~"$variant"'
# Envoy names a cluster after its variant; the route names `<variant>-with-fallback` when a failed
# attempt may retry on the fallback variant (gateway/envoy/names.py).
CLUSTER = f'{NAMESPACE}, envoy_cluster_name=~"$variant"'
ROUTE_CLUSTER = f'{NAMESPACE}, envoy_cluster_name=~"($variant)(-with-fallback)?"'
RATE = "$__rate_interval"


def quantile(q: float, histogram: str, selector: str, by: str, window: str = RATE) -> str:
    """The q-quantile of a histogram family's recent observations, one series per `by` group."""
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({histogram}_bucket{{{selector}}}[{window}])))"


def rate(counter: str, selector: str, by: str, window: str = RATE) -> str:
    return f"sum by ({by}) (rate({counter}{{{selector}}}[{window}]))"
