"""How long an operator flip takes to reach one real Envoy: to its ACK, and to the first request it serves.

The default split alternates between {baseline: 100} and {zero-layer: 100} through the admin API
(PUT /v1/weights), against the real `graystack gateway` process and a real Envoy (tests.support.stack).

Two loops, because the two questions need different PUTs:
  ack      PUT with wait_seconds=5 returns only once Envoy ACKed: client wall time of the PUT, and the
           gateway's own `ack_seconds`. Then traffic is polled to count requests that still went to the
           old variant after the ACK (the ACK comes from Envoy's main thread; workers follow).
  traffic  PUT with wait_seconds=0 is written to the socket (timer started before), and requests go
           through Envoy back-to-back until `x-graystack-variant` is the new target: the time to that
           request, and how many requests before it went to the old variant. The PUT's answer is read
           afterwards.
Reference (docs/architecture.md, "Reference measurements"): set() -> ACK p50 0.45-0.49 ms; set() -> first
request on the new cluster p50 1.3-1.6 ms, max 2.7 ms, <= 2 stale requests. Those were measured in-process;
here each flip also crosses the admin API (HTTP, JSON, FastAPI), which the numbers include.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time

import httpx

from bench._common import brief, running_stack, summarize, write_result
from graystack.local.gateway_stack import GatewayStack
from graystack.local.processes import wait_until

TARGETS = ("zero-layer", "baseline")  # the stack starts at baseline 100, so the first flip moves traffic
DEADLINE_S = 5.0


def served_by(stack: GatewayStack) -> str:
    response = stack.request()
    response.raise_for_status()
    return response.headers["x-graystack-variant"]


def poll_until_served_by(stack: GatewayStack, target: str, started: float) -> tuple[float, int]:
    """Requests through Envoy until one is served by `target`: (seconds since `started`, stale count)."""
    stale = 0
    while served_by(stack) != target:
        stale += 1
        if time.perf_counter() - started > DEADLINE_S:
            raise TimeoutError(f"no request reached {target} within {DEADLINE_S}s")
    return time.perf_counter() - started, stale


def ack_loop(stack: GatewayStack, flips: int, warmup: int) -> dict[str, list[float]]:
    """PUT and wait for the ACK; then count requests that still reached the old variant."""
    samples: dict[str, list[float]] = {"client_s": [], "server_ack_s": [], "stale_after_ack": []}
    with httpx.Client(base_url=stack.admin_url, timeout=15) as admin:
        for i in range(warmup + flips):
            target = TARGETS[i % 2]
            started = time.perf_counter()
            response = admin.put("/v1/weights", json={"weights": {target: 100}, "wait_seconds": 5})
            elapsed = time.perf_counter() - started
            response.raise_for_status()
            body = response.json()
            if not body["acked"]:
                raise RuntimeError(f"flip {i} to {target} was not ACKed: {body['status']['xds']}")
            _, stale = poll_until_served_by(stack, target, time.perf_counter())
            if i >= warmup:
                samples["client_s"].append(elapsed)
                samples["server_ack_s"].append(body["ack_seconds"])
                samples["stale_after_ack"].append(stale)
    return samples


def traffic_loop(stack: GatewayStack, flips: int, warmup: int) -> dict[str, list[float]]:
    """Send the PUT without waiting, then poll traffic until the new variant answers."""
    samples: dict[str, list[float]] = {"first_request_s": [], "stale_requests": []}
    admin = http.client.HTTPConnection("127.0.0.1", stack.ports["admin"], timeout=15)
    try:
        for i in range(warmup + flips):
            target = TARGETS[i % 2]
            body = json.dumps({"weights": {target: 100}, "wait_seconds": 0}).encode()
            started = time.perf_counter()
            admin.request("PUT", "/v1/weights", body, {"Content-Type": "application/json"})
            first, stale = poll_until_served_by(stack, target, started)
            response = admin.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"flip {i} to {target}: HTTP {response.status}")
            wait_until(lambda: stack.status()["xds"]["converged"], 10, "Envoy to ACK", interval=0.001)
            if i >= warmup:
                samples["first_request_s"].append(first)
                samples["stale_requests"].append(stale)
    finally:
        admin.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=100, help="measured flips per loop")
    parser.add_argument("--warmup", type=int, default=4, help="unmeasured flips first")
    args = parser.parse_args()
    with running_stack("bench-flip-") as stack:
        ack = ack_loop(stack, args.flips, args.warmup)
        traffic = traffic_loop(stack, args.flips, args.warmup)

    results = {
        "flip_to_ack_client_ms": summarize(ack["client_s"], 1000),
        "flip_to_ack_server_ms": summarize(ack["server_ack_s"], 1000),
        "stale_requests_after_ack": summarize(ack["stale_after_ack"]),
        "flip_to_first_new_request_ms": summarize(traffic["first_request_s"], 1000),
        "stale_requests_before_first_new": summarize(traffic["stale_requests"]),
    }
    path = write_result(
        "flip_latency",
        {
            "flips_per_loop": args.flips,
            "warmup_flips": args.warmup,
            "targets": list(TARGETS),
            "envoy_concurrency": 2,
            "note": "client times include the admin API's HTTP round trip; server_ack is measured by the "
            "gateway from after set_split() returns to the last ACK",
        },
        results,
    )
    print(f"flip -> ACK, PUT wall time (client):   {brief(results['flip_to_ack_client_ms'])}")
    print(f"flip -> ACK, ack_seconds (gateway):    {brief(results['flip_to_ack_server_ms'])}")
    print(f"stale requests after the ACK:          {brief(results['stale_requests_after_ack'], 'req')}")
    print(f"flip -> first request on new variant:  {brief(results['flip_to_first_new_request_ms'])}")
    print(
        f"stale requests before it:              {brief(results['stale_requests_before_first_new'], 'req')}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
