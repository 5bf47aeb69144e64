"""Metrics providers: measure each variant over the analysis window for gateway/rollout/analysis.py.

`direct` scrapes Envoy's admin stats and the pods' /metrics itself (the local stack has no Prometheus
server); a `prometheus` provider would ask PromQL the same questions. Both answer `MetricsProvider`.
"""

from gateway.metrics.direct import DirectProvider
from gateway.metrics.provider import MetricsProvider

__all__ = ["DirectProvider", "MetricsProvider"]
