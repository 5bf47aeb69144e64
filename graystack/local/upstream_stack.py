"""`graystack up --upstream NAME=URL ...`: Envoy, the gateway (its guard measuring them), a probe per
`--weights` checkpoint and Prometheus in front of inference servers the user already runs (vLLM,
llama.cpp, `transformers serve`, graystack's own), with no model server started here.

What each server offers is asked once, at start: its health route (graystack's `/readyz`, vLLM's and
llama.cpp's `/health`; none, and Envoy's active health checks are off for it) and whether it serves
Prometheus `/metrics` (then the gateway reads its latency histograms, labelled with the variant's name
whatever the server calls it). Nothing here knows the names `baseline` or `zero-layer`.

The probes compare nothing with what the servers loaded (`--loaded-check off`): third-party servers
export no `graystack_model_info`, and graystack's own label theirs with their own variant, not the
`NAME=` given here; a vLLM echoes the checkpoint's fingerprint only when started with it
(`--fingerprint-value`), which `up` neither does nor can tell.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from graystack.local import loopback
from graystack.local.gateway_stack import GatewayStack, graystack_argv, measuring_args
from graystack.local.processes import ManagedProcess, StartupError, start_process, wait_until

HEALTH_PATHS = ("/readyz", "/health")  # graystack's readiness; vLLM's, llama.cpp's, transformers serve's


@dataclass(frozen=True)
class Upstream:
    """A server the user runs: where it listens, and what it was found to offer."""

    name: str
    host: str  # an IP address: Envoy's EDS takes no host names
    port: int
    health_path: str | None = None
    metrics: bool = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_upstream(assignment: str) -> tuple[str, str, int]:
    """`NAME=http://HOST:PORT` as (name, IP address, port); a ValueError that names what is wrong."""
    name, sep, url = assignment.partition("=")
    if not sep or not name or not url:
        raise ValueError(f"{assignment!r}: expected NAME=URL, e.g. vllm-new=http://127.0.0.1:8000")
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"{assignment!r}: only http:// upstreams (Envoy talks plain HTTP/1.1 to them)")
    if parts.path not in ("", "/") or parts.query:
        raise ValueError(f"{assignment!r}: no path: Envoy forwards each request's own path (/v1/...)")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"{assignment!r}: give the host and the port, e.g. http://127.0.0.1:8000")
    return name, _address(parts.hostname, assignment), parts.port


def _address(host: str, where: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as error:
        raise ValueError(f"{where}: cannot resolve {host!r}: {error}") from None


def discover(name: str, host: str, port: int, timeout: float = 30.0) -> Upstream:
    """The server at host:port, once it answers HTTP: its health route and whether it has /metrics."""
    base = Upstream(name, host, port).url
    with httpx.Client(base_url=base, timeout=2.0) as client:
        try:
            wait_until(lambda: client.get("/").status_code > 0, timeout, f"{name} at {base}", interval=0.2)
        except TimeoutError:
            raise StartupError(f"{name}: nothing answers HTTP at {base} (is the server running?)") from None
        health = next((path for path in HEALTH_PATHS if _ok(client, path)), None)
        metrics = _serves_metrics(client)
    return Upstream(name, host, port, health, metrics)


def _serves_metrics(client: httpx.Client) -> bool:
    """Whether the server answers /metrics in Prometheus' text format (one request)."""
    try:
        response = client.get("/metrics")
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and "# TYPE" in response.text


def _ok(client: httpx.Client, path: str) -> bool:
    try:
        return client.get(path).status_code == 200
    except httpx.HTTPError:
        return False


def upstream_spec(upstreams: Mapping[str, Upstream], baseline: str) -> dict[str, Any]:
    """The spec `up` starts with: every request on the baseline (flip with `graystack weight`), a failed
    attempt on another variant retried on the baseline, each server health-checked on its own route or
    not at all, and a guard that expects no probe unless one runs (`--weights`)."""
    return {
        "name": "upstreams",
        "variants": {
            name: {
                "endpoints": [f"{up.host}:{up.port}" if ":" not in up.host else f"[{up.host}]:{up.port}"],
                "health_check": None if up.health_path is None else {"path": up.health_path},
            }
            for name, up in upstreams.items()
        },
        "routing": {
            "header": "X-Client-Type",
            "weights": {n: 100 if n == baseline else 0 for n in upstreams},
        },
        "timeouts": {"request": "60s"},
        "retries": {"on": "5xx,reset,connect-failure", "attempts": 1, "fallback": baseline},
        "health_check": {"interval": "1s"},
        "analysis": {"max_ttft_p95": "10s", "expected_weight_status": None},
    }


MERGED = ("analysis", "routing")  # sections a user's spec changes field by field, not wholesale


def overlay(spec: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`changes`' top-level fields over `spec`'s, `analysis` and `routing` merged field by field: a
    user's analysis that names some thresholds keeps the others `up` chose for servers it did not
    write, and `routing: {affinity: [...]}` turns cohorts on without restating the weights."""
    merged = {key: {**spec.get(key, {}), **(changes.get(key) or {})} for key in MERGED}
    return {**spec, **changes, **merged}


class UserServers:
    """Servers the user runs (name -> (IP, port)), asked what they offer at start, and a probe per
    `probes` checkpoint (name -> path); the guard measures each that serves /metrics, and each probe."""

    def __init__(
        self,
        addresses: Mapping[str, tuple[str, int]],
        baseline: str,
        spec_changes: dict[str, Any],
        probes: Mapping[str, Path] | None = None,
        probe_interval: float = 2.0,
    ) -> None:
        self.addresses = dict(addresses)
        self.baseline = baseline
        self.spec_changes = spec_changes
        self.probe_weights = dict(probes or {})
        self.probe_interval = probe_interval
        self.port_names = tuple(sorted(f"probe-{name}" for name in self.probe_weights))
        self.found: dict[str, Upstream] = {}
        self.probes: dict[str, tuple[ManagedProcess, int]] = {}

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        """The spec is written once the servers were asked what they offer."""
        self.found = {name: discover(name, host, port) for name, (host, port) in self.addresses.items()}
        for name, weights in self.probe_weights.items():
            port = ports[f"probe-{name}"]
            argv = [*graystack_argv(), "probe", "--target", self.found[name].url, "--variant", name]
            argv += ["--weights", str(weights), "--port", str(port), "--interval", str(self.probe_interval)]
            argv += ["--api", "openai", "--fingerprint-header", ""]  # what every server speaks; few send one
            argv += ["--loaded-check", "off"]  # see the module docstring
            self.probes[name] = (
                start_process(f"probe-{name}", [*argv, "--log-level", "warning"], logs),
                port,
            )
        return overlay(upstream_spec(self.found, self.baseline), self.spec_changes)

    def gateway_args(self, envoy_admin: str) -> list[str]:
        """The `direct` provider scrapes each server with /metrics (its series are the variant's, named
        by the `NAME=` prefix, whatever labels the server gives them), and each probe."""
        targets = [f"{name}={up.url}/metrics" for name, up in self.found.items() if up.metrics]
        targets += [f"http://127.0.0.1:{port}/metrics" for _, port in self.probes.values()]
        return measuring_args(envoy_admin, targets)

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        jobs = {}
        for name, up in self.found.items():
            if up.metrics:
                jobs[f"upstream-{name}"] = (up.url.removeprefix("http://"), "/metrics")
        for name, (_, port) in self.probes.items():
            jobs[f"probe-{name}"] = (f"127.0.0.1:{port}", "/metrics")
        return jobs

    def processes(self) -> list[ManagedProcess]:
        return [p for p, _ in self.probes.values()]


class UpstreamStack(GatewayStack):
    """The gateway stack given UserServers: `upstreams` (name -> (IP, port)), `probes` (name ->
    checkpoint)."""

    def __init__(
        self,
        workdir: Path,
        envoy: str,
        upstreams: Mapping[str, tuple[str, int]],
        baseline: str,
        spec_changes: dict[str, Any],
        *,
        probes: Mapping[str, Path] | None = None,
        ports: dict[str, int] | None = None,
        probe_interval: float = 2.0,
        prometheus: str | None = None,
    ) -> None:
        servers = UserServers(upstreams, baseline, spec_changes, probes, probe_interval)
        super().__init__(workdir, envoy, ports, upstreams=servers, prometheus=prometheus)
        self.user_servers = servers

    @property
    def probes(self) -> dict[str, tuple[ManagedProcess, int]]:
        return self.user_servers.probes

    def server_url(self, name: str) -> str:
        return self.user_servers.found[name].url

    def serving(self) -> bool:
        """Envoy is live and holds the gateway's config: requests reach the servers (a request of our
        own would need a model name each server accepts)."""
        ready = (
            loopback.get(f"http://127.0.0.1:{self.ports['envoy_admin']}/ready", timeout=2).status_code == 200
        )
        return ready and bool(self.status()["xds"]["converged"])
