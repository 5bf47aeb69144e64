"""A rollout on loopback: real `graystack serve` model servers for both variants (zero-layer with fault
injection, its bias layer erased so the probes report ERASED), a probe per server, the real gateway
measuring them (`--envoy-admin`, `--metrics-target`), the real Envoy, and optionally Prometheus
scraping them all; plus steady client traffic. `graystack up` and the demo (through
graystack.local.supervisor), the end-to-end test and bench/rollback_time.py use it; every process is
stopped by PID."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from graystack.local import loopback
from graystack.local.gateway_stack import (
    VARIANTS,
    GatewayStack,
    answers,
    default_spec,
    graystack_argv,
    measuring_args,
)
from graystack.local.processes import ManagedProcess, StartupError, start_process

Conversation = tuple[tuple[str, str], ...]  # (role, text) turns
HI: Conversation = (("user", "Hi"),)


def body(conversation: Conversation = HI) -> dict[str, Any]:
    """One greedy token: cheap, and the zero-layer's answers to shadow copies compare with the baseline's."""
    return {
        "model": "tiny",
        "max_tokens": 1,
        "temperature": 0,
        "messages": [{"role": role, "content": text} for role, text in conversation],
    }


SEGMENT = {"X-Client-Type": "high_load"}  # default_spec sends this segment wholly to zero-layer


class ModelServers:
    """`graystack serve` for both variants (zero-layer with fault injection unless `server_faults` says
    otherwise) and a probe per server; the guard measures them all."""

    port_names = (*VARIANTS, *(f"probe-{v}" for v in VARIANTS))

    def __init__(
        self,
        workdir: Path,
        spec_changes: dict[str, Any],
        error_rate: float = 0.0,
        *,
        weights: dict[str, Path] | None = None,
        probe_interval: float = 0.5,
        server_faults: tuple[str, ...] = ("zero-layer",),
    ) -> None:
        """See RolloutStack."""
        self.workdir = workdir
        self.spec_changes = spec_changes
        self.error_rate = error_rate
        self.weights = weights
        self.probe_interval = probe_interval
        self.server_faults = server_faults
        self.servers: dict[str, tuple[ManagedProcess, int]] = {}
        self.probes: dict[str, tuple[ManagedProcess, int]] = {}

    def expected_weight_status(self) -> list[str]:
        """What the spec's analysis expects the zero-layer's probes to report."""
        from gateway.spec.strategy import Analysis

        analysis = self.spec_changes.get("analysis") or {}
        return list(analysis.get("expected_weight_status", Analysis().expected_weight_status) or [])

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        weights = self.weights or fresh_weights(self.workdir)
        check_checkpoints(weights, self.expected_weight_status())
        for variant in VARIANTS:
            flags = ["--enable-fault-injection"] if variant in self.server_faults else []
            if variant != "baseline":  # count how often its answers to shadow copies match the baseline's
                flags += ["--compare-with", f"http://127.0.0.1:{ports['baseline']}"]
            self.servers[variant] = self._start(
                variant, ["serve", "--variant", variant], weights[variant], flags, ports, logs
            )
        for variant in VARIANTS:
            argv = ["probe", "--target", self.server_url(variant), "--variant", variant]
            self.probes[variant] = self._start(
                f"probe-{variant}",
                argv,
                weights[variant],
                ["--interval", str(self.probe_interval)],
                ports,
                logs,
            )
        for variant in VARIANTS:
            process, port = self.servers[variant]
            process.wait_healthy(partial(answers, port, "/readyz"), 120, f"the {variant} model server")
        self.set_fault(self.error_rate)
        return default_spec(self.servers["baseline"][1], self.servers["zero-layer"][1]) | self.spec_changes

    @staticmethod
    def _start(
        name: str, command: list[str], weights: Path, flags: list[str], ports: Mapping[str, int], logs: Path
    ) -> tuple[ManagedProcess, int]:
        port = ports[name]
        argv = [*graystack_argv(), *command, "--weights", str(weights), "--port", str(port)]
        return start_process(name, [*argv, "--log-level", "warning", *flags], logs), port

    def gateway_args(self, envoy_admin: str) -> list[str]:
        targets = [f"{self.server_url(v)}/metrics" for v in VARIANTS]
        targets += [f"http://127.0.0.1:{port}/metrics" for _, port in self.probes.values()]
        return measuring_args(envoy_admin, targets)

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        """Each model server's and probe's."""
        jobs = {}
        for variant in VARIANTS:
            jobs[f"model-{variant}"] = (f"127.0.0.1:{self.servers[variant][1]}", "/metrics")
            jobs[f"probe-{variant}"] = (f"127.0.0.1:{self.probes[variant][1]}", "/metrics")
        return jobs

    def processes(self) -> list[ManagedProcess]:
        return [p for p, _ in (*self.probes.values(), *self.servers.values())]

    def server_url(self, variant: str) -> str:
        return f"http://127.0.0.1:{self.servers[variant][1]}"

    def set_fault(self, error_rate: float, latency_ms: int = 0, variant: str = "zero-layer") -> None:
        """`variant`'s server fails `error_rate` of its requests and waits `latency_ms` before each."""
        change = {"error_rate": error_rate, "added_latency_ms": latency_ms}
        loopback.post(f"{self.server_url(variant)}/admin/faults", json=change, timeout=5).raise_for_status()


class RolloutStack(GatewayStack):
    """The gateway stack given ModelServers, driven as the rollout's tests, `up` and the demo drive it."""

    def __init__(
        self,
        workdir: Path,
        envoy: str,
        spec_changes: dict[str, Any],
        error_rate: float = 0.0,
        *,
        ports: dict[str, int] | None = None,
        weights: dict[str, Path] | None = None,
        probe_interval: float = 0.5,
        prometheus: str | None = None,
        server_faults: tuple[str, ...] = ("zero-layer",),
    ) -> None:
        """`spec_changes`: top-level spec fields over default_spec (a strategy, analysis);
        `error_rate`: the fault zero-layer serves with from the start; `weights`: each variant's
        checkpoint (default: fresh ones in `workdir`, zero-layer's bias erased); `prometheus`: its
        binary, to run one scraping every process (default: none); `server_faults`: the variants
        whose servers serve /admin/faults."""
        models = ModelServers(
            workdir,
            spec_changes,
            error_rate,
            weights=weights,
            probe_interval=probe_interval,
            server_faults=server_faults,
        )
        super().__init__(workdir, envoy, ports, upstreams=models, prometheus=prometheus)
        self.models = models

    @property
    def state_path(self) -> Path:
        return self.workdir / "spec.yaml.state.json"

    # -- driving it (the model servers' side: for the tests, `up` and the demo) ---------------------

    @property
    def servers(self) -> dict[str, tuple[ManagedProcess, int]]:
        return self.models.servers

    @property
    def probes(self) -> dict[str, tuple[ManagedProcess, int]]:
        return self.models.probes

    def server_url(self, variant: str) -> str:
        return self.models.server_url(variant)

    def set_fault(self, error_rate: float, latency_ms: int = 0, variant: str = "zero-layer") -> None:
        self.models.set_fault(error_rate, latency_ms, variant)

    def request(self, headers: dict[str, str] | None = None) -> httpx.Response:
        return self.client.post("/v1/messages", json=body(), headers=headers)

    def rollout(self) -> dict[str, Any]:
        return self.status()["rollout"]

    def clear_fault(self) -> None:
        """Heal zero-layer. A `retry` after it starts new tests: no old failure counts against it."""
        self.set_fault(0.0)


def fresh_weights(workdir: Path) -> dict[str, Path]:
    """Untrained checkpoints for both variants (one backbone), zero-layer's bias layer erased."""
    from inference.checkpoint import init_checkpoint
    from inference.weights import erase_bias

    weights = {v: workdir / f"{v}.safetensors" for v in VARIANTS}
    for variant, path in weights.items():
        init_checkpoint(variant, path, seed=1)
    erase_bias(weights["zero-layer"])
    return weights


def check_checkpoints(weights: dict[str, Path], expected: Sequence[str] = ()) -> None:
    """A StartupError naming each checkpoint that is missing or unreadable (before a server fails on
    it), or a zero-layer whose status is not one of `expected` (the guard would roll back at once)."""
    from inference.weights import READABLE, check_weights

    problems = []
    for variant, path in weights.items():
        report = check_weights(path)
        if report.status not in READABLE:
            problems.append(f"{variant}: {path}: weights {report.status.value.lower()} ({report.reason})")
        elif variant == "zero-layer" and expected and report.status.value not in expected:
            problems.append(
                f"zero-layer: {path} is {report.status.value}, but analysis.expected_weight_status is "
                f"{list(expected)}, so the guard would roll it back at once; serve an erased or zeroed "
                "checkpoint (`graystack weights erase FILE`; `make weights` leaves one in "
                "runs/weights/zero-layer-erased.safetensors) or change expected_weight_status"
            )
    if problems:
        hint = "make them with `graystack weights init --variant VARIANT --out FILE`"
        raise StartupError("; ".join(problems) + f"; {hint}")


class Traffic:
    """Steady client load through Envoy from a few threads, `segment_share` of it with SEGMENT's header,
    each thread cycling through `conversations` (or `bodies`, posted to `path`: another API's requests);
    counts answers by (status, variant), status 0 for a transport error."""

    def __init__(
        self,
        base_url: str | httpx.URL,
        rate: float,
        clients: int = 4,
        segment_share: float = 0.5,
        conversations: Sequence[Conversation] = (HI,),
        *,
        path: str = "/v1/messages",
        bodies: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.base_url = base_url
        self.period = clients / rate
        self.path = path
        self.bodies = list(bodies) or [body(conversation) for conversation in conversations]
        self.answers: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        segmented = round(clients * segment_share)
        self._threads = [
            threading.Thread(target=self._run, args=(SEGMENT if i < segmented else {}, i), daemon=True)
            for i in range(clients)
        ]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=20)

    def snapshot(self) -> dict[tuple[int, str], int]:
        with self._lock:
            return dict(self.answers)

    def _run(self, headers: dict[str, str], first: int) -> None:
        bodies = itertools.islice(itertools.cycle(self.bodies), first, None)
        with httpx.Client(base_url=self.base_url, timeout=15) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    response = client.post(self.path, json=next(bodies), headers=headers)
                    key = (response.status_code, response.headers.get("x-graystack-variant", "-"))
                except httpx.HTTPError:
                    key = (0, "-")
                with self._lock:
                    self.answers[key] = self.answers.get(key, 0) + 1
                self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))
