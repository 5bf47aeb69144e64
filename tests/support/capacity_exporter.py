"""`python -m tests.support.capacity_exporter --port N`: the leading gateway's capacity gauges as it exports
them in Kubernetes with rollout.capacity enabled, which the local stack (no Deployments to scale) cannot.

The gauges are the gateway's own metric objects (gateway/rollout/telemetry.py), set by its `record_capacity` to
a mid-step fleet and served from a registry of their own, so Prometheus scrapes these two families and
nothing else of the gateway twice. It runs until it is stopped (SIGTERM, by PID).
"""

from __future__ import annotations

import argparse
import threading

from prometheus_client import CollectorRegistry, start_http_server

from gateway.rollout import telemetry

ROLLOUT = "zero-layer"
GPUS_PER_POD = 1
GPU_HOUR_PRICE = 4.0
# zero-layer's plan wants 3 pods for its share: one found no GPU node, one is still starting
REPLICAS = {
    "baseline": {"wanted": 2, "running": 2, "ready": 2},
    "zero-layer": {"wanted": 3, "running": 2, "ready": 1},
}


def registry() -> CollectorRegistry:
    """The two gauges, set through the gateway's own `record_capacity` for REPLICAS at GPU_HOUR_PRICE."""
    view = {
        "variants": {
            variant: {**states, "cost_per_hour": states["running"] * GPUS_PER_POD * GPU_HOUR_PRICE}
            for variant, states in REPLICAS.items()
        }
    }
    telemetry.record_capacity(ROLLOUT, view)
    served = CollectorRegistry()
    served.register(telemetry.VARIANT_REPLICAS)
    served.register(telemetry.VARIANT_COST)
    return served


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.capacity_exporter", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    start_http_server(args.port, addr="127.0.0.1", registry=registry())
    threading.Event().wait()


if __name__ == "__main__":
    main()
