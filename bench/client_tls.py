"""What opening an httpx client costs the process, with the TLS context httpx builds for each client and
with one shared (gateway/outbound.py, graystack/local/loopback.py): CPU per client, side by side, in
alternating rounds. A look opens one client for its scrapes or queries; the tests' stacks poll status
every 50 ms.

    .venv/bin/python -m bench.client_tls        # -> bench/results/client_tls.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx

from bench._common import summarize, write_result
from gateway import outbound


def cpu_per_client(shared: bool, n: int) -> float:
    """CPU seconds to open and close `n` AsyncClients, divided by `n`."""
    started = time.process_time()
    for _ in range(n):
        client = httpx.AsyncClient(verify=outbound.tls()) if shared else httpx.AsyncClient()
        del client
    return (time.process_time() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("-n", type=int, default=20, help="clients a round")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    outbound.tls()  # the shared context made once, as the first look makes it
    each: dict[str, list[float]] = {"own_context": [], "shared_context": []}
    for _ in range(args.rounds):
        each["own_context"].append(cpu_per_client(False, args.n))
        each["shared_context"].append(cpu_per_client(True, args.n))
    results = {name: summarize(values, 1000) for name, values in each.items()}
    for name, stats in results.items():
        print(f"{name:15s} CPU per client: p50 {stats['p50']:.3f} ms (rounds of {args.n})")
    write_result(
        "client_tls",
        {"rounds": args.rounds, "clients_a_round": args.n, "unit": "ms of CPU"},
        results,
        args.out,
    )


if __name__ == "__main__":
    main()
