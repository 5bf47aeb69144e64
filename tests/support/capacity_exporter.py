"""`python -m tests.support.capacity_exporter --port N`: the leading gateway's capacity gauges as it exports
them in Kubernetes with rollout.capacity enabled, which the local stack (no Deployments to scale) cannot.

The gauges are the gateway's own metric objects (gateway/rollout/metrics.py, found by their names) set to
a mid-step fleet and served from a registry of their own, so Prometheus scrapes these two families and
nothing else of the gateway twice. It runs until it is stopped (SIGTERM, by PID).
"""

from __future__ import annotations

import argparse
import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics import MetricWrapperBase

from gateway.rollout import metrics

ROLLOUT = "zero-layer"
GPUS_PER_POD = 1
GPU_HOUR_PRICE = 4.0
# zero-layer's plan wants 3 pods for its share: one found no GPU node, one is still starting
REPLICAS = {
    "baseline": {"wanted": 2, "running": 2, "ready": 2},
    "zero-layer": {"wanted": 3, "running": 2, "ready": 1},
}


def gateway_family(name: str) -> MetricWrapperBase:
    found = [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase) and m._name == name]
    if len(found) != 1:
        raise LookupError(f"gateway/rollout/metrics.py defines {len(found)} families named {name}")
    return found[0]


def registry() -> CollectorRegistry:
    """The two gauges, set as the leading gateway would for REPLICAS at GPU_HOUR_PRICE."""
    replicas = gateway_family("graystack_variant_replicas")
    cost = gateway_family("graystack_variant_cost_per_hour")
    for variant, states in REPLICAS.items():
        for state, count in states.items():
            replicas.labels(rollout=ROLLOUT, variant=variant, state=state).set(count)
        cost.labels(rollout=ROLLOUT, variant=variant).set(states["running"] * GPUS_PER_POD * GPU_HOUR_PRICE)
    served = CollectorRegistry()
    served.register(replicas)
    served.register(cost)
    return served


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.capacity_exporter", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    start_http_server(args.port, addr="127.0.0.1", registry=registry())
    threading.Event().wait()


if __name__ == "__main__":
    main()
