"""What the gateway hop (Envoy) adds to a request: the same POST through Envoy and straight to the upstream.

The stack (tests.support.stack: stand-in upstreams, `graystack gateway`, real Envoy) is set to
{baseline: 100}, so both paths end at the same baseline process. The two are measured side by side
in one run, interleaved in blocks (alternating which goes first) so drift on this shared box hits both
alike, each with its own keep-alive client. Sequential first (one request in flight: pure added
latency), then 16 in flight (httpx.AsyncClient) for latency under a little concurrency and throughput.
Client, Envoy and upstream share the machine's CPUs, so absolute numbers are loopback-on-a-small-box.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx

from bench._common import brief, running_stack, summarize, write_result
from graystack.local.gateway_stack import INFERENCE_PATH

PATH = INFERENCE_PATH  # a path Envoy routes to the variants


def check(response: httpx.Response) -> None:
    if response.status_code != 200 or response.headers.get("x-graystack-variant") != "baseline":
        raise RuntimeError(f"unexpected answer: {response.status_code} {response.headers}")


def sequential(urls: dict[str, str], n: int, block: int, warmup: int) -> dict[str, list[float]]:
    """n requests per target, one at a time, in alternating blocks."""
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    clients = {name: httpx.Client(base_url=url, timeout=10) for name, url in urls.items()}
    try:
        for client in clients.values():
            for _ in range(warmup):
                check(client.post(PATH, json={}))
        names = list(urls)
        for b in range(n // block):
            for name in names if b % 2 == 0 else names[::-1]:
                client = clients[name]
                for _ in range(block):
                    started = time.perf_counter()
                    response = client.post(PATH, json={})
                    latencies[name].append(time.perf_counter() - started)
                    check(response)
    finally:
        for client in clients.values():
            client.close()
    return latencies


async def concurrent(
    urls: dict[str, str], n: int, rounds: int, concurrency: int
) -> dict[str, dict[str, Any]]:
    """n requests per target with `concurrency` in flight, split into alternating rounds.

    Each worker has its own one-connection client: a shared httpx.AsyncClient pool was measured at
    less than half the throughput with 10x the p99 here (pool contention), drowning the hop itself.
    """
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    wall: dict[str, float] = dict.fromkeys(urls, 0.0)
    clients = {
        name: [httpx.AsyncClient(base_url=url, timeout=10) for _ in range(concurrency)]
        for name, url in urls.items()
    }

    async def worker(client: httpx.AsyncClient, name: str, count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            response = await client.post(PATH, json={})
            latencies[name].append(time.perf_counter() - started)
            check(response)

    try:
        for pool in clients.values():  # open the connections before timing
            await asyncio.gather(*(client.post(PATH, json={}) for client in pool))
        names = list(urls)
        per_worker = n // rounds // concurrency
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                started = time.perf_counter()
                await asyncio.gather(*(worker(client, name, per_worker) for client in clients[name]))
                wall[name] += time.perf_counter() - started
    finally:
        for pool in clients.values():
            for client in pool:
                await client.aclose()
    return {
        name: {
            "latency_ms": summarize(latencies[name], 1000),
            "rps": round(len(latencies[name]) / wall[name], 1),
        }
        for name in urls
    }


def compare(envoy: dict[str, float], direct: dict[str, float]) -> dict[str, dict[str, float]]:
    return {
        q: {"added_ms": round(envoy[q] - direct[q], 4), "ratio": round(envoy[q] / direct[q], 3)}
        for q in ("p50", "p90", "p99", "mean")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="requests per target, sequential run")
    parser.add_argument("--block", type=int, default=50, help="requests per block before switching target")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16, help="0 skips the concurrent run")
    parser.add_argument("--concurrent-n", type=int, default=4096, help="requests per target, concurrent run")
    args = parser.parse_args()
    with running_stack("bench-hop-") as stack:
        response = httpx.put(
            f"{stack.admin_url}/v1/weights", json={"weights": {"baseline": 100}, "wait_seconds": 5}
        )
        response.raise_for_status()
        if not response.json()["acked"]:
            raise RuntimeError("Envoy did not ACK {baseline: 100}")
        urls = {
            "envoy": f"http://127.0.0.1:{stack.ports['listen']}",
            "direct": f"http://127.0.0.1:{stack.ports['baseline']}",
        }
        seq = sequential(urls, args.n, args.block, args.warmup)
        conc = (
            asyncio.run(concurrent(urls, args.concurrent_n, 4, args.concurrency))
            if args.concurrency
            else None
        )

    stats = {name: summarize(values, 1000) for name, values in seq.items()}
    results: dict[str, Any] = {
        "sequential": {**stats, "envoy_vs_direct": compare(stats["envoy"], stats["direct"])}
    }
    print(f"sequential, through Envoy: {brief(stats['envoy'])}")
    print(f"sequential, direct:        {brief(stats['direct'])}")
    for q, diff in results["sequential"]["envoy_vs_direct"].items():
        print(f"  {q}: Envoy adds {diff['added_ms']:.3f} ms (x{diff['ratio']})")
    if conc:
        added = compare(conc["envoy"]["latency_ms"], conc["direct"]["latency_ms"])
        results[f"concurrency_{args.concurrency}"] = {**conc, "envoy_vs_direct": added}
        for name in ("envoy", "direct"):
            print(
                f"{args.concurrency} in flight, {name:6s}: {brief(conc[name]['latency_ms'])}  {conc[name]['rps']} req/s"
            )
    path = write_result(
        "gateway_hop",
        {
            "requests_per_target": args.n,
            "block": args.block,
            "warmup": args.warmup,
            "concurrency": args.concurrency,
            "concurrent_requests_per_target": args.concurrent_n,
            "path": PATH,
            "split": {"baseline": 100},
            "envoy_concurrency": 2,
            "clients": "sequential: one keep-alive httpx.Client per target; concurrent: one httpx.AsyncClient "
            "(one connection) per worker per target",
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
