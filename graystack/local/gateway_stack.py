"""A gateway stack on loopback: its upstreams (two stand-ins unless it is given others), the real
`graystack gateway` process and the real Envoy, each on a free port (or the ports given), each stopped by
PID. Tests and benchmarks use it; RolloutStack (graystack.local.rollout_stack) gives it the real model
servers, UpstreamStack (graystack.local.upstream_stack) servers the user runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from copy import deepcopy
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.admin.protocol import FaultResult
from graystack.admin_client import AdminClient
from graystack.local import loopback
from graystack.local.processes import ManagedProcess, free_port, start_process, stop_together, wait_until
from graystack.local.prometheus import start_prometheus

VARIANTS = ("baseline", "zero-layer")
# A path Envoy routes to the variants (gateway/envoy/routes.py); the stand-ins answer any body.
INFERENCE_PATH = "/v1/chat/completions"
STACK_PORTS = ("listen", "envoy_admin", "xds", "admin", "prometheus")  # the upstreams name theirs


def default_spec(baseline_port: int, zero_layer_port: int) -> dict[str, Any]:
    return {
        "name": "zero-layer",
        "variants": {
            "baseline": {"endpoints": [f"127.0.0.1:{baseline_port}"]},
            "zero-layer": {"endpoints": [f"127.0.0.1:{zero_layer_port}"]},
        },
        "routing": {
            "header": "X-Client-Type",
            "rules": [
                {"value": "high_load", "variant": "zero-layer"},
                {"value": "mobile", "weights": {"baseline": 80, "zero-layer": 20}},
            ],
            "weights": {"baseline": 100, "zero-layer": 0},
        },
        # request bounds a whole answer, however steadily it streams: 10 s cut the CPU baseline's
        # long-prompt streams at 24 users (issue 16); first_byte bounds only the first byte.
        "timeouts": {"request": "60s", "first_byte": "1s"},
        "retries": {"on": "5xx,reset,connect-failure", "attempts": 1, "fallback": "baseline"},
        "health_check": {"interval": "1s"},
        # The guard's defaults but the TTFT SLO: on CPU model servers a 4 KiB prompt's first token takes
        # seconds under load (bench.inference_ttft), so the production default of 2 s would roll back
        # whichever variant carries more traffic, for the hardware, not the variant.
        "analysis": {"max_ttft_p95": "10s"},
    }


def envoy_argv(envoy: str, bootstrap: Path, concurrency: int = 2) -> list[str]:
    """The real Envoy on `bootstrap`, as every stack here starts it (no hot restart, warnings only)."""
    return [
        envoy,
        "-c",
        str(bootstrap),
        "--disable-hot-restart",
        "--concurrency",
        str(concurrency),
        "-l",
        "warning",
    ]


def graystack_argv() -> list[str]:
    return [sys.executable, "-m", "graystack"]


def measuring_args(envoy_admin: str, targets: list[str]) -> list[str]:
    """`graystack gateway` flags for a guard that measures: Envoy's admin and the pods' /metrics."""
    argv = ["--envoy-admin", envoy_admin]
    for target in targets:
        argv += ["--metrics-target", target]
    return argv


def answers(port: int, path: str) -> bool:
    return loopback.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200


class UpstreamServers(Protocol):
    """What serves behind Envoy: started (or found) before the gateway, stopped with the stack by PID."""

    port_names: tuple[str, ...]  # the ports they listen on, chosen with the stack's (STACK_PORTS)

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        """Start them (or find them) and wait until they answer; the spec the gateway starts with."""
        ...

    def gateway_args(self, envoy_admin: str) -> list[str]:
        """More `graystack gateway` flags: what the guard measures (none: it measures nothing)."""
        ...

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        """Prometheus jobs for them, `(host:port, metrics path)`."""
        ...

    def processes(self) -> list[ManagedProcess]:
        """What they started (stopped by the stack)."""
        ...


class StandIns:
    """Two stand-in upstreams (graystack.local.standin), one per variant; the guard measures nothing."""

    port_names = VARIANTS

    def __init__(self) -> None:
        self.running: dict[str, ManagedProcess] = {}

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        for variant in VARIANTS:
            argv = [sys.executable, "-m", "graystack.local.standin", "--name", variant]
            self.running[variant] = start_process(variant, [*argv, "--port", str(ports[variant])], logs)
        for variant in VARIANTS:
            wait_until(partial(answers, ports[variant], "/readyz"), 15, f"{variant} stand-in upstream")
        return default_spec(ports["baseline"], ports["zero-layer"])

    def gateway_args(self, envoy_admin: str) -> list[str]:
        return []

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        return {}

    def processes(self) -> list[ManagedProcess]:
        return list(self.running.values())


class Running:
    """Upstreams the caller started and stops: nothing to start here; the gateway starts on `spec` and
    measures nothing more."""

    port_names: tuple[str, ...] = ()

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        return self.spec

    def gateway_args(self, envoy_admin: str) -> list[str]:
        return []

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        return {}

    def processes(self) -> list[ManagedProcess]:
        return []


class GatewayStack:
    node_id = "graystack-envoy"
    fault_injection = True  # the gateway takes `graystack fault`, as `graystack up` starts it

    def __init__(
        self,
        workdir: Path,
        envoy: str,
        ports: dict[str, int] | None = None,
        *,
        upstreams: UpstreamServers | None = None,
        prometheus: str | None = None,
    ) -> None:
        """`ports`: fixed ports by name (STACK_PORTS and the upstreams' `port_names`); the others are
        free ones. `upstreams`: default two stand-ins. `prometheus`: its binary, to run one scraping
        `scrape_jobs()` (default: none)."""
        self.workdir = workdir
        self.envoy_binary = envoy
        self.upstreams = StandIns() if upstreams is None else upstreams
        self.prometheus_binary = prometheus
        self.logs = workdir / "logs"
        names = (*STACK_PORTS, *self.upstreams.port_names)
        self.ports = {name: free_port() for name in names} | (ports or {})
        self.spec_path = workdir / "spec.yaml"
        self._spec: dict[str, Any] = {}  # the upstreams' first spec, once they started
        self.gateway: ManagedProcess | None = None
        self.envoy: ManagedProcess | None = None
        self.prometheus: ManagedProcess | None = None
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.ports['listen']}", timeout=15.0)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> GatewayStack:
        self.start_upstreams()
        self.write_spec(self._spec)
        self.start_gateway()
        bootstrap = self.workdir / "envoy.yaml"
        bootstrap.write_text(self.bootstrap_yaml())
        self.envoy = start_process("envoy", envoy_argv(self.envoy_binary, bootstrap), self.logs)
        self.envoy.wait_healthy(self.serving, 30, "the first request through Envoy")
        if self.prometheus_binary:
            self.prometheus = start_prometheus(
                self.prometheus_binary, self.scrape_jobs(), self.workdir, self.ports["prometheus"]
            )
        return self

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        """Prometheus jobs, `(host:port, metrics path)`: Envoy's, the gateway's and the upstreams'."""
        return {
            "envoy": (f"127.0.0.1:{self.ports['envoy_admin']}", "/stats/prometheus"),
            "gateway": (f"127.0.0.1:{self.ports['admin']}", "/metrics"),
            **self.upstreams.scrape_jobs(),
        }

    def serving(self) -> bool:
        """Whether requests through Envoy reach the upstreams."""
        return self.request().status_code == 200

    def start_upstreams(self) -> None:
        self._spec = self.upstreams.start(self.ports, self.logs)

    def bootstrap_yaml(self) -> str:
        """What `graystack envoy-bootstrap` prints for this stack's ports, rendered in this process: a CLI
        process per stack start cost half a second of CPU (tests/integration/test_envoy_validate.py runs
        the command itself)."""
        from gateway.envoy.bootstrap import BootstrapOptions, bootstrap_yaml
        from gateway.envoy.resources import ListenerAddress

        return bootstrap_yaml(
            BootstrapOptions(
                node_id=self.node_id,
                xds_port=self.ports["xds"],
                listen=ListenerAddress("127.0.0.1", self.ports["listen"]),
                admin_port=self.ports["envoy_admin"],
            )
        )

    def gateway_argv(self) -> list[str]:
        """`graystack gateway` on this stack's spec and ports: fault injection (`graystack fault`) as `up`
        has it, and what the upstreams' guard measures."""
        return [
            *graystack_argv(),
            "gateway",
            "--spec",
            str(self.spec_path),
            "--xds-port",
            str(self.ports["xds"]),
            "--admin-port",
            str(self.ports["admin"]),
            *(["--enable-fault-injection"] if self.fault_injection else []),
            *self.upstreams.gateway_args(f"http://127.0.0.1:{self.ports['envoy_admin']}"),
        ]

    def start_gateway(self) -> ManagedProcess:
        self.gateway = start_process("gateway", self.gateway_argv(), self.logs)
        self.gateway.wait_healthy(
            lambda: answers(self.ports["admin"], "/healthz"), 20, "the gateway admin API"
        )
        return self.gateway

    def processes(self) -> list[ManagedProcess | None]:
        """Every process the stack started (None: not started), each stopped by PID in `stop()`."""
        return [self.prometheus, self.envoy, self.gateway, *self.upstreams.processes()]

    def stop(self) -> None:
        """Envoy and the gateway one after the other, as they were stopped before (nothing judges an
        upstream's absence meanwhile); then the upstreams, which no longer serve anyone, all at once."""
        self.client.close()
        for process in (self.prometheus, self.envoy, self.gateway):
            if process is not None:
                process.stop()
        stop_together(self.upstreams.processes())

    # -- driving it -------------------------------------------------------------------------------

    def cli(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [*graystack_argv(), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GRAYSTACK_ADMIN_URL": self.admin_url},
        )
        if check and result.returncode != 0:
            raise AssertionError(f"graystack {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result.stdout

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['admin']}"

    @property
    def spec(self) -> dict[str, Any]:
        """A copy of the last spec written, to edit and write back."""
        return deepcopy(self._spec)

    def write_spec(self, spec: dict[str, Any]) -> None:
        self._spec = deepcopy(spec)
        tmp = self.spec_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(spec, sort_keys=False))
        tmp.replace(self.spec_path)

    def status(self) -> dict[str, Any]:
        return loopback.get(f"{self.admin_url}/v1/status", timeout=5).json()

    def wait_converged(self, generation_above: int = -1, timeout: float = 15) -> dict[str, Any]:
        """Every proxy has ACKed the current config (routes included: the gateway counts a proxy
        mid-handshake as not converged, gateway/xds/server.py), and none is a stream just opened that
        has not yet said which node it is (a reconnecting Envoy's, listed with no types)."""

        def done() -> dict[str, Any] | None:
            status = self.status()
            proxies = status["xds"]["proxies"]
            named = proxies and all(proxy["node"] for proxy in proxies)
            return (
                status
                if named and status["xds"]["converged"] and status["generation"] > generation_above
                else None
            )

        return wait_until(done, timeout, "every proxy to ACK the gateway's config")

    def request(self, headers: dict[str, str] | None = None) -> httpx.Response:
        return self.client.post(INFERENCE_PATH, json={}, headers=headers)

    def metric(self, url: str, name: str, labels: dict[str, str]) -> float:
        """The sum of `name`'s samples at `url` whose labels include `labels` (0 if none)."""
        text = loopback.get(url, timeout=5).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def inject_fault(
        self, variant: str, error_rate: float = 0.0, latency_ms: int = 0, status: int = 503
    ) -> FaultResult:
        """`graystack fault`: Envoy fails or delays `variant`'s attempts, whatever its upstream."""
        with AdminClient(self.admin_url) as admin:
            return admin.set_fault(variant, error_rate, status, latency_ms)
