"""`graystack demo` (what `make demo` runs): the whole stack at work on this machine in about two minutes.

`graystack up`'s supervisor starts Envoy, the gateway, real model servers for both variants (the
weights `make weights` trained: the baseline and its derived zero-layer, ACTIVE), their
probes and Prometheus (when installed) on free loopback ports; steady client traffic flows through
Envoy while the rollout controller walks zero-layer through shadow (Envoy mirrors every request to
it; clients get the baseline's answer, and the zero-layer's greedy answers to the copies are
compared with the baseline's) and its steps by itself, each left only when the analysis passes; then a fault injected into zero-layer is rolled back by the guard. A live view
shows it happen; a timeline says what happened when. Every process is stopped by PID at the end.

A third of the clients send `X-Client-Type: high_load`, a segment the spec pins to zero-layer (early
adopters), so the candidate gathers enough evidence for the error-rate check within seconds even at
the 5 % step on a small CPU machine. The thresholds are looser than production's and the screen says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from gateway.admin.protocol import RolloutSection, Status
from graystack.admin_client import AdminClient
from graystack.console.live_metrics import VariantMeter
from graystack.console.live_view import Timeline, render
from graystack.console.status_view import weight_text
from graystack.local.completions import held_out_completions
from graystack.local.rollout_stack import RolloutStack, Traffic
from graystack.local.supervisor import Shutdown, Supervisor, UpOptions, checkpoints_in

RATE = 30  # requests per second through Envoy, all clients together
CLIENTS = 6
SEGMENT_SHARE = 1 / 3
FAULT_ERROR_RATE = 0.3
DEMO_SPEC: dict[str, Any] = {
    "routing": {
        "header": "X-Client-Type",
        "rules": [{"value": "high_load", "variant": "zero-layer"}],
        "weights": {"baseline": 100, "zero-layer": 0},
    },
    "strategy": {
        "shadow": {"percent": 100, "duration": "10s", "gate": {"success_rate": 0.99, "max_latency_ratio": 3}},
        "steps": [{"weight": 5, "hold": "10s"}, {"weight": 20, "hold": "10s"}, {"weight": 100}],
    },
    "analysis": {
        "interval": "1s",
        "window": "30s",
        "max_error_rate": 0.02,
        "min_detectable_error_rate": 0.2,
        "max_latency_ratio": 3,
        "max_ttft_p95": "3s",
        "expected_weight_status": ["ACTIVE"],
        "min_shadow_agreement": 0.9,
    },
}
NOTE = (
    f"{RATE} req/s through Envoy, a third of it X-Client-Type: high_load (pinned to zero-layer).  Demo "
    "thresholds: errors above 2 % (production default: 0.3 %), anytime-valid over the whole rollout with "
    "a 1 % false-rollback budget, each stage long enough to catch 20 % errors (production: 1 %); latency "
    "at most 3x the baseline's in distribution; TTFT p95 <= 3 s; probes report ACTIVE (the derived "
    "sparse bias), its bias zero past the derived window; shadow: 10 s, leaving at >= 99 % success with "
    ">= 90 % of greedy answers the baseline's."
)


def demo_spec(weights_dir: Path) -> dict[str, Any]:
    """DEMO_SPEC, bounding the zero-layer's effective window by the one its derivation recorded."""
    manifest = weights_dir / "manifest.json"
    derived = json.loads(manifest.read_text()).get("derive", {}) if manifest.is_file() else {}
    if "effective_window" not in derived:
        return DEMO_SPEC
    bound = {"max_effective_window": derived["effective_window"]}
    return {**DEMO_SPEC, "analysis": {**DEMO_SPEC["analysis"], **bound}}


class DemoFailed(RuntimeError):
    """A stage did not happen in time; the message says which and where the rollout stood."""


class Walkthrough:
    def __init__(self, stack: RolloutStack, console: Console, timeline: Timeline) -> None:
        self.stack = stack
        self.console = console
        self.timeline = timeline
        self.label: str | None = None
        self.status: Status | None = None
        self.admin = AdminClient(stack.admin_url, timeout=5)

    def run(self) -> None:
        stack = self.stack
        servers = {v: stack.server_url(v) for v in stack.servers}
        probes = {v: f"http://127.0.0.1:{port}" for v, (_, port) in stack.probes.items()}
        meter = VariantMeter(servers, probes)
        traffic = Traffic(
            str(stack.client.base_url),
            RATE,
            clients=CLIENTS,
            segment_share=SEGMENT_SHARE,
            conversations=held_out_completions(),
        )
        try:
            with self.admin, traffic, Live(console=self.console, auto_refresh=False) as live:
                self.event(f"client traffic starts: {RATE} req/s through Envoy")
                self.watch(live, meter, lambda r: r.phase == "promoted", 150, "the rollout to promote")
                self.pause(live, meter, 3)
                stack.inject_fault("zero-layer", FAULT_ERROR_RATE)
                self.event(
                    f"fault injected by Envoy: zero-layer fails {FAULT_ERROR_RATE:.0%} of its attempts"
                )
                rolled_back = self.watch(
                    live,
                    meter,
                    lambda r: r.phase == "rolled_back" and not r.rollback_in_flight,
                    60,
                    "the guard to roll back",
                )
                acked = rolled_back.last_rollback_seconds
                assert acked is not None  # rolled back and no longer in flight: ACKed
                self.event(f"rollback ACKed by every Envoy {1000 * acked:.1f} ms after the decision")
                self.pause(live, meter, 4)
        finally:
            meter.close()
        self.report(traffic)

    def event(self, what: str) -> None:
        at = time.time()
        self.timeline.add(at, what)
        self.console.print(f"[bold]{at - self.timeline.started:6.1f}s[/bold]  {what}")

    def frame(self, live: Live, meter: VariantMeter) -> RolloutSection:
        self.status = self.admin.status()
        rollout = self.status.rollout
        if not isinstance(rollout, RolloutSection):
            raise DemoFailed("the gateway runs no rollout controller")
        if rollout.label != self.label:
            self.label = rollout.label
            self.timeline.saw_stage(rollout)
            self.console.print(f"        rollout at {self.label} ({weight_text(rollout)})", style="dim")
        elapsed = time.time() - self.timeline.started
        live.update(render("graystack demo", elapsed, self.status, meter.read(), NOTE), refresh=True)
        return rollout

    def watch(
        self,
        live: Live,
        meter: VariantMeter,
        done: Callable[[RolloutSection], bool],
        timeout: float,
        what: str,
    ) -> RolloutSection:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rollout = self.frame(live, meter)
            if done(rollout):
                return rollout
            time.sleep(0.5)
        raise DemoFailed(f"timed out after {timeout:.0f}s waiting for {what}; rollout at {self.label}")

    def pause(self, live: Live, meter: VariantMeter, seconds: float) -> None:
        """Keep the view live for `seconds` (so the change just made shows in the rates)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.frame(live, meter)
            time.sleep(0.5)

    def report(self, traffic: Traffic) -> None:
        rollout = self.status.rollout if self.status else None
        history = rollout.history if isinstance(rollout, RolloutSection) else []
        self.console.print(self.timeline.table(history))
        answers = traffic.snapshot()
        total = sum(answers.values())
        failed = sum(n for (code, _), n in answers.items() if code != 200)
        self.console.print(
            f"clients sent {total} requests; {failed} failed (zero-layer's failed attempts were retried "
            "on the baseline by Envoy)"
        )


def run_demo(run_dir: Path, weights_dir: Path) -> int:
    console = Console()
    missing = [path.name for path in checkpoints_in(weights_dir).values() if not path.is_file()]
    if missing:
        console.print(
            f"[bold red]no trained weights:[/bold red] {weights_dir} lacks {', '.join(missing)}; `make weights` "
            f"trains them on this machine (about 2 min on 2 cores, cached), or `graystack weights train "
            f"--out-dir {weights_dir}`"
        )
        return 1
    options = UpOptions(run_dir, demo_spec(weights_dir), weights_dir=weights_dir, free_ports=True)
    supervisor = Supervisor(options, say=console.print)
    timeline = Timeline(time.time())
    try:
        with supervisor.running() as stack:
            if not isinstance(stack, RolloutStack):  # the demo's options name no --upstream
                raise DemoFailed("the demo runs graystack's own model servers, not upstreams")
            timeline.add(
                time.time(), f"stack up: Envoy on {stack.client.base_url}, admin on {stack.admin_url}"
            )
            Walkthrough(stack, console, timeline).run()
    except Shutdown:
        return 130
    except DemoFailed as error:
        console.print(f"[bold red]demo failed:[/bold red] {error}; logs in {supervisor.run_dir / 'logs'}")
        return 1
    return 0
