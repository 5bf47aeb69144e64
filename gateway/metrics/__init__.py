"""Metrics providers: measure each variant over the analysis window for gateway/rollout/analysis.py.

`direct` scrapes Envoy's admin stats and the pods' /metrics itself (the local stack needs no Prometheus
server); `prometheus` asks PromQL the same questions of a Prometheus that scrapes them. Both answer
`MetricsProvider`, from the same counters.
"""

from gateway.metrics.direct import DirectProvider
from gateway.metrics.prometheus import PrometheusProvider
from gateway.metrics.provider import MetricsProvider

__all__ = ["DirectProvider", "MetricsProvider", "PrometheusProvider"]
