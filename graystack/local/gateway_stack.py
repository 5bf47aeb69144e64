"""A gateway stack on loopback: two stand-in upstreams, the real `graystack gateway` process and the
real Envoy, each on a free port (or the ports given), each stopped by PID. Tests and benchmarks use it;
RolloutStack (graystack.local.rollout_stack) puts the real model servers in the stand-ins' place."""

from __future__ import annotations

import os
import subprocess
import sys
from copy import deepcopy
from pathlib import Path

import httpx
import yaml

from gateway.admin.protocol import FaultResult
from gateway.names import ROUTE_CONFIG
from graystack.admin_client import AdminClient
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from graystack.local.prometheus import start_prometheus

VARIANTS = ("baseline", "zero-layer")
# A path Envoy routes to the variants (gateway/envoy/routes.py); the stand-ins answer any body.
INFERENCE_PATH = "/v1/chat/completions"
PORT_NAMES = ("listen", "envoy_admin", "xds", "admin", "baseline", "zero-layer")


def default_spec(baseline_port: int, zero_layer_port: int) -> dict:
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


class GatewayStack:
    node_id = "graystack-envoy"
    fault_injection = True  # the gateway takes `graystack fault`, as `graystack up` starts it
    prometheus_binary: str | None = None  # the measuring stacks': a Prometheus scraping scrape_jobs()

    port_names = PORT_NAMES

    def __init__(self, workdir: Path, envoy: str, ports: dict[str, int] | None = None) -> None:
        """`ports`: fixed ports by name (see `port_names`); the others are free ones."""
        self.workdir = workdir
        self.envoy_binary = envoy
        self.logs = workdir / "logs"
        self.ports = {name: free_port() for name in self.port_names} | (ports or {})
        self.spec_path = workdir / "spec.yaml"
        self._spec = self.first_spec()
        self.upstreams: dict[str, ManagedProcess] = {}
        self.gateway: ManagedProcess | None = None
        self.envoy: ManagedProcess | None = None
        self.prometheus: ManagedProcess | None = None
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.ports['listen']}", timeout=15.0)

    def first_spec(self) -> dict:
        """The spec the stack starts with (before `start_upstreams()`, which may complete it)."""
        return default_spec(self.ports["baseline"], self.ports["zero-layer"])

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> GatewayStack:
        self.start_upstreams()
        self.write_spec(self._spec)
        self.start_gateway()
        bootstrap = self.workdir / "envoy.yaml"
        bootstrap.write_text(self.cli("envoy-bootstrap", *self.bootstrap_args()))
        self.envoy = start_process("envoy", envoy_argv(self.envoy_binary, bootstrap), self.logs)
        self.envoy.wait_healthy(self.serving, 30, "the first request through Envoy")
        if self.prometheus_binary:
            self.prometheus = start_prometheus(
                self.prometheus_binary, self.scrape_jobs(), self.workdir, self.ports["prometheus"]
            )
        return self

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        """Prometheus jobs, `(host:port, metrics path)`: Envoy and the gateway (the measuring stacks add
        their servers and probes)."""
        return {
            "envoy": (f"127.0.0.1:{self.ports['envoy_admin']}", "/stats/prometheus"),
            "gateway": (f"127.0.0.1:{self.ports['admin']}", "/metrics"),
        }

    def serving(self) -> bool:
        """Whether requests through Envoy reach the upstreams."""
        return self.request().status_code == 200

    def start_upstreams(self) -> None:
        for variant in VARIANTS:
            argv = [
                sys.executable,
                "-m",
                "graystack.local.standin",
                "--name",
                variant,
                "--port",
                str(self.ports[variant]),
            ]
            self.upstreams[variant] = start_process(variant, argv, self.logs)
        for variant in VARIANTS:
            wait_until(
                lambda v=variant: self._get(self.ports[v], "/readyz"), 15, f"{variant} stand-in upstream"
            )

    def bootstrap_args(self) -> list[str]:
        return [
            "--xds-port",
            str(self.ports["xds"]),
            "--listen-port",
            str(self.ports["listen"]),
            "--admin-port",
            str(self.ports["envoy_admin"]),
            "--node-id",
            self.node_id,
        ]

    def gateway_argv(self) -> list[str]:
        """`graystack gateway` on this stack's spec and ports, with the subclass's `gateway_args()`."""
        return [
            *self.graystack_argv(),
            "gateway",
            "--spec",
            str(self.spec_path),
            "--xds-port",
            str(self.ports["xds"]),
            "--admin-port",
            str(self.ports["admin"]),
            *self.gateway_args(),
        ]

    def start_gateway(self) -> ManagedProcess:
        self.gateway = start_process("gateway", self.gateway_argv(), self.logs)
        self.gateway.wait_healthy(
            lambda: self._get(self.ports["admin"], "/healthz"), 20, "the gateway admin API"
        )
        return self.gateway

    def gateway_args(self) -> list[str]:
        """More `graystack gateway` flags: fault injection (`graystack fault`) as `up` has it; the stacks
        whose guard measures add Envoy's admin and the targets the direct provider scrapes."""
        return ["--enable-fault-injection"] if self.fault_injection else []

    def measuring_args(self, targets: list[str]) -> list[str]:
        argv = ["--envoy-admin", f"http://127.0.0.1:{self.ports['envoy_admin']}"]
        for target in targets:
            argv += ["--metrics-target", target]
        return argv

    def processes(self) -> list[ManagedProcess | None]:
        """Every process the stack started (None: not started), each stopped by PID in `stop()`."""
        return [self.prometheus, self.envoy, self.gateway, *self.upstreams.values()]

    def stop(self) -> None:
        self.client.close()
        for process in self.processes():
            if process is not None:
                process.stop()

    # -- driving it -------------------------------------------------------------------------------

    @staticmethod
    def graystack_argv() -> list[str]:
        return [sys.executable, "-m", "graystack"]

    def cli(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [*self.graystack_argv(), *args],
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
    def spec(self) -> dict:
        """A copy of the last spec written, to edit and write back."""
        return deepcopy(self._spec)

    def write_spec(self, spec: dict) -> None:
        self._spec = deepcopy(spec)
        tmp = self.spec_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(spec, sort_keys=False))
        tmp.replace(self.spec_path)

    def write_raw_spec(self, text: str) -> None:
        tmp = self.spec_path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.spec_path)

    def status(self) -> dict:
        return httpx.get(f"{self.admin_url}/v1/status", timeout=5).json()

    def wait_converged(self, generation_above: int = -1, timeout: float = 15) -> dict:
        """Every proxy has ACKed the current config (routes included: the gateway counts a proxy
        mid-handshake as not converged, gateway/xds/server.py)."""

        def done():
            status = self.status()
            proxies = status["xds"]["proxies"]
            return (
                status
                if proxies and status["xds"]["converged"] and status["generation"] > generation_above
                else None
            )

        return wait_until(done, timeout, "every proxy to ACK the gateway's config")

    def request(self, headers: dict | None = None) -> httpx.Response:
        return self.client.post(INFERENCE_PATH, json={}, headers=headers)

    def variant_counts(self, n: int, headers: dict | None = None) -> dict[str, int]:
        counts = dict.fromkeys(VARIANTS, 0)
        for _ in range(n):
            response = self.request(headers)
            if response.status_code != 200:
                raise AssertionError(f"request failed ({response.status_code}): {response.text}")
            counts[response.headers["x-graystack-variant"]] += 1
        return counts

    def inject_fault(
        self, variant: str, error_rate: float = 0.0, latency_ms: int = 0, status: int = 503
    ) -> FaultResult:
        """`graystack fault`: Envoy fails or delays `variant`'s attempts, whatever its upstream."""
        with AdminClient(self.admin_url) as admin:
            return admin.set_fault(variant, error_rate, status, latency_ms)

    def set_upstream(
        self, variant: str, mode: str, stall_seconds: float = 5.0, anonymous: bool = False
    ) -> None:
        """`anonymous`: its answers carry no `x-graystack-variant`, as a server not graystack's."""
        body = {"mode": mode, "stall_seconds": stall_seconds, "reset": True, "anonymous": anonymous}
        httpx.post(
            f"http://127.0.0.1:{self.ports[variant]}/_control", json=body, timeout=5
        ).raise_for_status()

    def upstream_answers(self, variant: str) -> dict[str, int]:
        return httpx.get(f"http://127.0.0.1:{self.ports[variant]}/_stats", timeout=5).json()

    def envoy_stats(self) -> dict[str, int]:
        text = httpx.get(f"http://127.0.0.1:{self.ports['envoy_admin']}/stats", timeout=5).text
        stats = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().lstrip("-").isdigit():
                stats[name] = int(value)
        return stats

    def envoy_route_version(self) -> str:
        dump = httpx.get(
            f"http://127.0.0.1:{self.ports['envoy_admin']}/config_dump",
            params={"resource": "dynamic_route_configs"},
            timeout=5,
        ).json()
        (main,) = [
            c for c in dump["configs"] if c["route_config"]["name"] == ROUTE_CONFIG
        ]  # not a fault hop's
        return main["version_info"]

    @staticmethod
    def _get(port: int, path: str) -> bool:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200
