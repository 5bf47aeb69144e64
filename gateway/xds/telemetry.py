"""The control plane's metric families (their names: gateway/families.py), read by dashboards."""

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from gateway import families

CONNECTED_PROXIES = Gauge(families.XDS_CONNECTED_PROXIES, "ADS streams open from Envoy proxies")
CONVERGED_PROXIES = Gauge(
    families.XDS_CONVERGED_PROXIES, "Connected proxies that have ACKed the latest version of every type"
)
PROXY_CONNECTED = Gauge(
    families.XDS_PROXY_CONNECTED,
    "1 while the proxy's ADS stream is open; 0 once it ended (it routes by its last ACKed configuration) "
    "until it reconnects, or is forgotten after the gateway's --forget-proxies-after",
    ["node"],
)
PUSHES = Counter(families.XDS_PUSHES, "DiscoveryResponses sent", ["type"])
NACKS = Counter(families.XDS_NACKS, "DiscoveryResponses rejected by a proxy", ["type"])
ACK_SECONDS = Histogram(
    families.XDS_ACK_SECONDS,
    "Time from sending a DiscoveryResponse to the proxy's ACK",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


def zero_counters(short_names: Iterable[str]) -> None:
    """Create the per-type counters at 0, so that Prometheus' increase() sees a first NACK."""
    for name in short_names:
        PUSHES.labels(name)
        NACKS.labels(name)
