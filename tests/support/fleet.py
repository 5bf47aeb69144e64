"""graystack on separate hosts (network namespaces, tests/support/network.py): the gateway on one, an
Envoy on each of several more, and the two variants' stand-in upstreams on two others. Clients reach
the Envoys, and the test reaches the gateway's admin API (token-protected, as off loopback it must be),
over the bridge, from the root namespace.

Each Envoy has its own node id (`envoy-1`, ...), as the chart's pods have theirs, and may reach the
control plane through a delay proxy on the gateway's host (the link's latency); faults are the
network's (`Host.partition`, `Host.lose`, `Host.heal`).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from gateway.admin.protocol import Status
from gateway.envoy.bootstrap import BootstrapOptions, bootstrap_yaml
from gateway.envoy.resources import ListenerAddress
from graystack.admin_client import AdminClient
from graystack.binaries import find_binary
from graystack.local.gateway_stack import envoy_argv
from graystack.local.processes import wait_until
from tests.support.network import Host, Network

TOKEN = "fleet-test-token"
XDS_PORT, ADMIN_PORT, LISTEN_PORT, ENVOY_ADMIN_PORT, UPSTREAM_PORT, DELAYED_XDS_PORT = (
    18000,
    9000,
    8080,
    9901,
    8000,
    18001,
)
INFERENCE_PATH = "/v1/chat/completions"


def fleet_spec(baseline: Host, candidate: Host, strategy: bool) -> dict:
    spec = {
        "name": "zero-layer",
        "variants": {
            "baseline": {"endpoints": [f"{baseline.ip}:{UPSTREAM_PORT}"]},
            "zero-layer": {"endpoints": [f"{candidate.ip}:{UPSTREAM_PORT}"]},
        },
        "routing": {"header": "X-Client-Type", "weights": {"baseline": 80, "zero-layer": 20}},
        "timeouts": {"request": "10s", "first_byte": "2s"},
        "retries": {"on": "5xx,reset,connect-failure", "attempts": 1, "fallback": "baseline"},
        "health_check": {"interval": "1s"},
    }
    if strategy:  # a rollout at its first step, held: only an operator (the test) moves it
        spec["routing"]["weights"] = {"baseline": 100, "zero-layer": 0}
        spec["strategy"] = {
            "steps": [{"weight": 20, "hold": "1h"}, {"weight": 50, "hold": "1h"}, {"weight": 100}]
        }
    return spec


class Fleet:
    def __init__(
        self,
        network: Network,
        workdir: Path,
        envoys: int = 3,
        xds_delay_ms: float = 0.0,
        strategy: bool = False,
        routing: dict | None = None,
    ) -> None:
        """`routing`: fields over the fleet spec's routing (cohorts, for one)."""
        self.network = network
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.envoy_count = envoys
        self.xds_delay_ms = xds_delay_ms
        self.strategy = strategy
        self.routing = routing or {}
        self.gateway_host = network.host("gateway")
        self.upstreams = {"baseline": network.host("baseline"), "zero-layer": network.host("candidate")}
        self.envoys = [network.host(f"envoy{i}") for i in range(1, envoys + 1)]
        self.spec_path = workdir / "spec.yaml"
        self.gateway: subprocess.Popen | None = None
        self.admin = AdminClient(f"http://{self.gateway_host.ip}:{ADMIN_PORT}", token=TOKEN, timeout=10)

    # -- starting ---------------------------------------------------------------------------------

    def start(self) -> Fleet:
        for name, host in self.upstreams.items():
            argv = [sys.executable, "-m", "graystack.local.standin", "--name", name]
            host.start([*argv, "--host", host.ip, "--port", str(UPSTREAM_PORT)], self.logs / f"{name}.log")
        for host in self.upstreams.values():
            wait_until(
                lambda h=host: self._get(f"http://{h.ip}:{UPSTREAM_PORT}/readyz"), 20, f"upstream {host.name}"
            )
        spec = fleet_spec(*self.upstreams.values(), self.strategy)
        spec["routing"].update(self.routing)
        self.spec_path.write_text(yaml.safe_dump(spec))
        self.start_gateway()
        xds = (self.gateway_host.ip, XDS_PORT)
        if self.xds_delay_ms:
            xds = self.gateway_host.delay_proxy(
                DELAYED_XDS_PORT, (self.gateway_host.ip, XDS_PORT), self.xds_delay_ms
            )
        envoy = find_binary("envoy")
        for number, host in enumerate(self.envoys, start=1):
            bootstrap = self.workdir / f"envoy-{number}.yaml"
            options = BootstrapOptions(
                node_id=f"envoy-{number}",
                xds_host=xds[0],
                xds_port=xds[1],
                listen=ListenerAddress("0.0.0.0", LISTEN_PORT),
                admin_port=ENVOY_ADMIN_PORT,
            )
            bootstrap.write_text(bootstrap_yaml(options))
            host.start(envoy_argv(envoy, bootstrap, 1), self.logs / f"envoy-{number}.log")
        wait_until(lambda: len(self.status().xds.proxies) == self.envoy_count, 30, "every Envoy connected")
        for number in range(len(self.envoys)):
            wait_until(lambda n=number: self.request(n).status_code == 200, 30, f"envoy-{number + 1} serving")
        return self

    def start_gateway(self) -> None:
        argv = [sys.executable, "-m", "graystack", "gateway", "--spec", str(self.spec_path)]
        argv += ["--xds-host", "0.0.0.0", "--xds-port", str(XDS_PORT)]
        argv += [
            "--admin-host",
            self.gateway_host.ip,
            "--admin-port",
            str(ADMIN_PORT),
            "--admin-token",
            TOKEN,
        ]
        self.gateway = self.gateway_host.start(argv, self.logs / "gateway.log")
        wait_until(
            lambda: self._get(f"http://{self.gateway_host.ip}:{ADMIN_PORT}/healthz"), 30, "the gateway"
        )

    @staticmethod
    def _get(url: str) -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    # -- driving it -------------------------------------------------------------------------------

    def request(
        self, envoy: int, client: httpx.Client | None = None, headers: dict | None = None
    ) -> httpx.Response:
        url = f"http://{self.envoys[envoy].ip}:{LISTEN_PORT}{INFERENCE_PATH}"
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        return (client or httpx).post(url, json=body, headers=headers, timeout=15)

    def status(self) -> Status:
        return self.admin.status()

    def proxies(self) -> dict[str, bool]:
        """node -> converged, for the connected proxies."""
        return {proxy.node: proxy.converged for proxy in self.status().xds.proxies}

    def disconnected(self) -> list[str]:
        return [proxy.node for proxy in self.status().xds.disconnected]

    def kill_gateway(self) -> None:
        assert self.gateway is not None
        self.gateway.kill()
        self.gateway.wait(10)

    def wait(self, predicate, seconds: float, what: str) -> float:
        """Seconds until `predicate()` held (TimeoutError naming `what` past `seconds`)."""
        started = time.monotonic()
        wait_until(predicate, seconds, what, interval=0.1)
        return time.monotonic() - started

    def wait_for_status(self, predicate, seconds: float, what: str) -> Status:
        """The first status for which `predicate(status)` holds."""

        def matching() -> Status | None:
            status = self.status()
            return status if predicate(status) else None

        return wait_until(matching, seconds, what, interval=0.1)
