"""Metrics providers: read each variant's cumulative counters for the rollout analysis
(gateway/metrics/observations.py says what they hand over).

`direct` scrapes Envoy's admin stats and the pods' /metrics itself (the local stack needs no Prometheus
server); `prometheus` reads the same series from a Prometheus that scrapes them. Both answer
`MetricsProvider`. Nothing here imports gateway.rollout (whose spec checks the query overrides).
"""

from gateway.metrics.direct import DirectProvider
from gateway.metrics.prometheus import PrometheusProvider
from gateway.metrics.provider import MetricsProvider

__all__ = ["DirectProvider", "MetricsProvider", "PrometheusProvider"]
