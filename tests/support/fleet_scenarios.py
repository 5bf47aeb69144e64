"""The fleet's network scenarios (issue 19), each run on a fresh Fleet and returning what it measured;
tests/integration/test_fleet_network.py asserts on the measurements, bench/fleet_network.py records them.

Clients beside the Envoys send requests back to back for the whole scenario; a failed request is any
answer but a 200, or a transport error, on the Envoys the scenario does not cut off.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

import httpx

from graystack.local.processes import wait_until
from tests.support.fleet import Fleet

LOSS_PERCENT = 1
ONE_WAY_MS = 25.0  # 50 ms round trip between each Envoy and the gateway


class Clients:
    """One client per Envoy, each sending requests back to back from its own thread, until stopped."""

    def __init__(self, fleet: Fleet, envoys: list[int]) -> None:
        self.fleet = fleet
        self.answers: Counter = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(envoy,), daemon=True) for envoy in envoys]

    def _run(self, envoy: int) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                try:
                    response = self.fleet.request(envoy, client)
                    self.answers[response.status_code] += 1
                    if response.status_code != 200:
                        self.failures.append(
                            f"envoy-{envoy + 1}: HTTP {response.status_code}: {response.text[:200]}"
                        )
                except httpx.HTTPError as error:
                    self.answers["error"] += 1
                    self.failures.append(f"envoy-{envoy + 1}: {type(error).__name__}: {error}")
                time.sleep(0.01)

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(20)

    def summary(self) -> dict:
        return {
            "requests": sum(self.answers.values()),
            "failed": len(self.failures),
            "failures": self.failures[:5],
        }


def flips_under_loss_and_delay(fleet: Fleet, flips: int) -> dict:
    """The default split flipped `flips` times while every Envoy <-> gateway link loses LOSS_PERCENT of
    its packets and carries ONE_WAY_MS each way: each flip's time to every proxy's ACK (the admin
    API's own measure), and whether every proxy converged each time."""
    fleet.gateway_host.lose(LOSS_PERCENT, *fleet.envoys)
    ack_seconds, unacked = [], 0
    with Clients(fleet, list(range(len(fleet.envoys)))) as clients:
        for flip in range(flips):
            candidate = 20 if flip % 2 else 80
            answer = fleet.admin.set_weights(
                {"baseline": 100 - candidate, "zero-layer": candidate}, wait_seconds=10
            )
            if answer.acked and answer.proxies == len(fleet.envoys):
                ack_seconds.append(answer.ack_seconds)
            else:
                unacked += 1
    return {
        **clients.summary(),
        "flips": flips,
        "unacked": unacked,
        "ack_seconds": ack_seconds,
        "dropped": fleet.gateway_host.dropped(),
    }


def partition_during_rollback(fleet: Fleet, dead_peer_bound: float) -> dict:
    """envoy-3 cut off from the gateway (both ways, silently) at 20 %, then a rollback: how long until
    the gateway lists it disconnected, what the rollback reports, and how long after the heal it is
    back, ACKed, and no longer pending."""
    cut = fleet.envoys[2]
    with Clients(fleet, [0, 1]) as clients:
        fleet.admin.rollout_command("promote")
        fleet.wait(
            lambda: len(fleet.proxies()) == 3 and all(fleet.proxies().values()), 10, "the promotion ACKed"
        )
        cut.partition(fleet.gateway_host)
        detect = fleet.wait(
            lambda: fleet.disconnected() == ["envoy-3"], dead_peer_bound + 5, "envoy-3 noticed"
        )
        rollback = fleet.admin.rollout_command("rollback", wait_seconds=5)
        pending = fleet.wait_for_status(lambda s: s.rollout.rollback_pending, 10, "the pending rollback")
        healed = time.monotonic()
        cut.heal()
        wait_until(
            lambda: not fleet.status().rollout.rollback_pending and fleet.proxies().get("envoy-3"),
            15,
            "envoy-3 back and ACKed",
            interval=0.1,
        )
        converge = time.monotonic() - healed
    return {
        **clients.summary(),
        "detect_seconds": detect,
        "converge_seconds": converge,
        "rollback_acked_by_connected": rollback.acked,
        "connected_during": rollback.proxies,
        "pending": [proxy.node for proxy in pending.rollout.rollback_pending],
        "alerts": [alert.message for alert in pending.rollout.alerts],
    }


def gateway_killed_mid_rollout(fleet: Fleet) -> dict:
    """The gateway SIGKILLed at the rollout's first step under load, and started again on the same spec
    and state file: the Envoys serve on by their last config meanwhile; how long until all three are
    back and converged, and where the rollout stands after."""
    with Clients(fleet, list(range(len(fleet.envoys)))) as clients:
        fleet.admin.rollout_command("promote")
        fleet.wait(
            lambda: len(fleet.proxies()) == 3 and all(fleet.proxies().values()), 10, "the promotion ACKed"
        )
        before = fleet.status().rollout
        fleet.kill_gateway()
        time.sleep(1.0)  # down for a second under load
        restarted = time.monotonic()
        fleet.start_gateway()
        wait_until(  # a restart takes about a second quiet, over 15 s on a box loaded as the suite loads it
            lambda: len(fleet.proxies()) == 3 and all(fleet.proxies().values()), 60, "all back", interval=0.1
        )
        reconnect = time.monotonic() - restarted
        after = fleet.status().rollout
    return {
        **clients.summary(),
        "reconnect_seconds": reconnect,
        "before": (before.label, before.weight),
        "after": (after.label, after.weight),
    }


def envoy_says_unhealthy(fleet: Fleet, envoy: int, cluster: str) -> bool:
    """Whether the Envoy's active health check has failed the cluster's host (its admin is on loopback
    inside its host, so it is asked from there)."""
    script = "import httpx; print(httpx.get('http://127.0.0.1:9901/clusters', timeout=2).text)"
    done = fleet.envoys[envoy].run([sys.executable, "-c", script], timeout=10)
    flags = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(f"{cluster}::") and "health_flags" in line
    ]
    return bool(flags) and all("failed_active_hc" in line for line in flags)


def upstream_partitioned(fleet: Fleet) -> dict:
    """The candidate's host cut off from everything under load (20 % of requests go to it): how long
    until every Envoy's health check ejects it, and what the clients saw; then healed."""
    candidate = fleet.upstreams["zero-layer"]
    everyone = range(len(fleet.envoys))
    with Clients(fleet, list(everyone)) as clients:
        time.sleep(0.5)
        cut = time.monotonic()
        candidate.partition()
        wait_until(
            lambda: all(envoy_says_unhealthy(fleet, e, "zero-layer") for e in everyone),
            15,
            "ejected",
            interval=0.2,
        )
        eject = time.monotonic() - cut
        time.sleep(1.0)  # the fallback carries the candidate's share
        candidate.heal()
        wait_until(
            lambda: not any(envoy_says_unhealthy(fleet, e, "zero-layer") for e in everyone),
            15,
            "back",
            interval=0.2,
        )
    return {**clients.summary(), "eject_seconds": eject, "in_flight_at_most": len(fleet.envoys)}
