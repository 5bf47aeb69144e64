"""A fleet over a real network, measured: the scenarios of tests/integration/test_fleet_network.py, each on
a fresh fleet (the gateway, three Envoys and two stand-in upstreams, each on its own host: network
namespaces on a bridge; tests/support/network.py), with clients beside the Envoys the whole time.

  flips      the default split flipped --flips times over links that lose 1 % of packets and carry
             25 ms each way between each Envoy and the gateway: flip -> every proxy ACKed (the admin
             API's ack_seconds)
  partition  envoy-3 silently cut off from the gateway, then a rollback: time until the gateway lists
             it disconnected; after the heal, until it is back, ACKed and no longer pending
  kill       the gateway SIGKILLed mid-rollout, restarted a second later: time until every proxy is back
             and converged; where the rollout stands after
  upstream   the candidate's host cut off from everything: time until every Envoy's health check
             ejected it
Each but flips runs --runs times. Needs root, `ip` and `nft` (`make nftables`). Writes
bench/results/fleet_network.json.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import summarize, write_result
from gateway.xds.server import KEEPALIVE_S, KEEPALIVE_TIMEOUT_S
from tests.support import fleet_scenarios as scenarios
from tests.support.fleet import Fleet
from tests.support.network import Network

DEAD_PEER_BOUND_S = KEEPALIVE_S + KEEPALIVE_TIMEOUT_S + 2


def on_fresh_fleet(run: Callable[[Fleet], dict[str, Any]], **fleet_options: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fleet-") as scratch:
        workdir = Path(scratch)
        with Network(workdir / "network") as network:
            return run(Fleet(network, workdir, **fleet_options).start())


def totals(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "requests": sum(run["requests"] for run in runs),
        "failed": sum(run["failed"] for run in runs),
        "failures": [failure for run in runs for failure in run["failures"]][:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = {}

    flips = on_fresh_fleet(
        lambda f: scenarios.flips_under_loss_and_delay(f, args.flips), xds_delay_ms=scenarios.ONE_WAY_MS
    )
    results["flips"] = {
        **totals([flips]),
        "flips": args.flips,
        "unacked": flips["unacked"],
        "ack_ms": summarize(flips["ack_seconds"], 1000),
    }
    print(f"flips: {results['flips']}")

    partitions = [
        on_fresh_fleet(lambda f: scenarios.partition_during_rollback(f, DEAD_PEER_BOUND_S), strategy=True)
        for _ in range(args.runs)
    ]
    results["partition"] = {
        **totals(partitions),
        "detect_s": summarize([run["detect_seconds"] for run in partitions]),
        "converge_after_heal_s": summarize([run["converge_seconds"] for run in partitions]),
        "pending": [run["pending"] for run in partitions],
    }
    print(f"partition: {results['partition']}")

    kills = [on_fresh_fleet(scenarios.gateway_killed_mid_rollout, strategy=True) for _ in range(args.runs)]
    results["kill"] = {
        **totals(kills),
        "reconnect_s": summarize([run["reconnect_seconds"] for run in kills]),
        "resumed": [run["after"] == run["before"] for run in kills],
    }
    print(f"kill: {results['kill']}")

    upstreams = [on_fresh_fleet(scenarios.upstream_partitioned) for _ in range(args.runs)]
    results["upstream"] = {
        **totals(upstreams),
        "eject_s": summarize([run["eject_seconds"] for run in upstreams]),
    }
    print(f"upstream: {results['upstream']}")

    parameters = {
        "envoys": 3,
        "loss_percent": scenarios.LOSS_PERCENT,
        "one_way_ms": scenarios.ONE_WAY_MS,
        "keepalive_s": KEEPALIVE_S,
        "keepalive_timeout_s": KEEPALIVE_TIMEOUT_S,
        "runs": args.runs,
    }
    print(write_result("fleet_network", parameters, results))


if __name__ == "__main__":
    main()
