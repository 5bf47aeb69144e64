"""The gateway in front of servers nobody here wrote: Envoy's added latency and flip -> first request.

llama.cpp (xllamacpp) and `transformers serve` on the tiny Llama the tests make
(tests/support/third_party; `make third-party` installs them), behind `graystack gateway` and the real
Envoy. Each server is told by its own answer (model id, `system_fingerprint`), not by a header.
  hop    one-token greedy chat completions to llama.cpp, straight and through Envoy, one at a time in
         alternating blocks (drift on this shared box hits both alike): the medians' difference is the
         hop. The model's own work (about a millisecond) is in both.
  flip   the default split alternates between {transformers: 100} and {llama-cpp: 100} (admin API,
         PUT /v1/weights, not waiting for the ACK); requests go through Envoy back-to-back until the
         new server answers: the time from the PUT to that answer, and how many went to the old one.
Also each server's start (process spawn to /health 200), as bench/results/third_party.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench._common import brief, envoy_binary, summarize, write_result
from graystack.local.processes import wait_until
from tests.support.third_party.models import tiny_model
from tests.support.third_party.servers import chat_body, start_llama_cpp, start_transformers_serve
from tests.support.third_party.stack import HEADER, ThirdPartyStack

DEADLINE_S = 5.0


def hop(stack: ThirdPartyStack, n: int, block: int) -> dict[str, list[float]]:
    """Seconds per request to llama.cpp, straight and through Envoy, in alternating blocks."""
    urls = {"direct": stack.servers["llama-cpp"].url, "envoy": stack.url}
    clients = {
        name: httpx.Client(base_url=url, timeout=10, headers={HEADER: "llama-cpp"})
        for name, url in urls.items()
    }
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    try:
        for b in range(n // block):
            for name in urls if b % 2 == 0 else reversed(urls):
                for _ in range(block):
                    started = time.perf_counter()
                    response = clients[name].post("/v1/chat/completions", json=chat_body())
                    latencies[name].append(time.perf_counter() - started)
                    assert stack.server_of(response) == "llama-cpp"
    finally:
        for client in clients.values():
            client.close()
    return latencies


def flips(stack: ThirdPartyStack, count: int) -> dict[str, list[float]]:
    """PUT a 100 % split to the other server, then requests until it answers."""
    samples: dict[str, list[float]] = {"first_request_s": [], "stale_requests": []}
    with httpx.Client(base_url=stack.admin_url, timeout=15) as admin:
        for i in range(count):
            target = ("transformers", "llama-cpp")[i % 2]
            started = time.perf_counter()
            admin.put("/v1/weights", json={"weights": {target: 100}, "wait_seconds": 0}).raise_for_status()
            stale = 0
            while stack.server_of(stack.request()) != target:
                stale += 1
                if time.perf_counter() - started > DEADLINE_S:
                    raise TimeoutError(f"no request reached {target} within {DEADLINE_S}s")
            samples["first_request_s"].append(time.perf_counter() - started)
            samples["stale_requests"].append(stale)
            wait_until(lambda: stack.status()["xds"]["converged"], 10, "Envoy to ACK", interval=0.001)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600, help="hop: requests per path")
    parser.add_argument("--block", type=int, default=50, help="hop: requests per block")
    parser.add_argument("--flips", type=int, default=40, help="measured flips")
    args = parser.parse_args()
    envoy = envoy_binary()
    with tempfile.TemporaryDirectory(prefix="bench-third-party-") as workdir:
        model = tiny_model()
        servers = {
            "llama-cpp": start_llama_cpp(model, Path(workdir) / "logs"),
            "transformers": start_transformers_serve(model, Path(workdir) / "logs"),
        }
        stack = ThirdPartyStack(Path(workdir), envoy, servers)
        try:
            stack.start()
            latencies = hop(stack, args.requests, args.block)
            flipped = flips(stack, args.flips)
        finally:
            stack.stop()
            for server in servers.values():
                server.stop()

    direct, via_envoy = summarize(latencies["direct"], 1000), summarize(latencies["envoy"], 1000)
    results: dict[str, Any] = {
        "start_to_healthy_s": {name: round(server.started_in, 3) for name, server in servers.items()},
        "llama_cpp_direct_ms": direct,
        "llama_cpp_through_envoy_ms": via_envoy,
        "hop_added_p50_ms": round(via_envoy["p50"] - direct["p50"], 4),
        "flip_to_first_new_request_ms": summarize(flipped["first_request_s"], 1000),
        "stale_requests_before_first_new": summarize(flipped["stale_requests"]),
    }
    parameters = {
        "requests_per_path": args.requests,
        "block": args.block,
        "flips": args.flips,
        "max_tokens": 1,
    }
    path = write_result("third_party", parameters, results)
    print(f"start to /health 200:                  {results['start_to_healthy_s']}")
    print(f"llama.cpp straight:                    {brief(direct)}")
    print(f"llama.cpp through Envoy:               {brief(via_envoy)}")
    print(f"flip -> first request on the new one:  {brief(results['flip_to_first_new_request_ms'])}")
    print(
        f"stale requests before it:              {brief(results['stale_requests_before_first_new'], 'req')}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
