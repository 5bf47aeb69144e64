"""The live view of a rollout (rich): phase, weights, per-variant request rate, error rate, TTFT p95 and
weight status, the last analysis, recent events; and the timeline printed at the end of a run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gateway.admin.protocol import RolloutSection, RolloutStatus, Status, TransitionStatus
from graystack.admin_client import AdminClient, AdminError
from graystack.console.live_metrics import VariantMeter, VariantStats
from graystack.console.status_view import capacity_lines, weight_text

PHASE_STYLE = {"progressing": "yellow", "promoted": "green", "rolled_back": "red", "shadow": "cyan"}


@dataclass
class Timeline:
    """What happened when (wall-clock seconds): the run's own events, and the rollout's transitions."""

    started: float
    events: list[tuple[float, str]] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)  # a rollout label -> its split, as seen

    def saw_stage(self, rollout: RolloutStatus) -> None:
        self.stages[rollout.label] = weight_text(rollout)

    def add(self, at: float, what: str) -> None:
        self.events.append((at, what))

    def merged(self, history: list[TransitionStatus]) -> list[tuple[float, str]]:
        transitions = [
            (h.at, f"rollout {h.source} -> {self._stage(h.target)}: {h.reason}")
            for h in history
            if h.at >= self.started
        ]
        return sorted([*self.events, *transitions])

    def _stage(self, label: str) -> str:
        return f"{label} ({self.stages[label]})" if label in self.stages else label

    def table(self, history: list[TransitionStatus]) -> Table:
        table = Table(title="timeline", title_justify="left", show_edge=False)
        table.add_column("t", justify="right", style="bold")
        table.add_column("what")
        for at, what in self.merged(history):
            table.add_row(f"{at - self.started:6.1f}s", what)
        return table


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def variant_table(status: Status, stats: dict[str, VariantStats]) -> Table:
    weights = status.routing.weights if status.routing else {}
    table = Table(show_edge=False, expand=False)
    for column in ("variant", "split", "req/s", "errors", "TTFT p95", "weight status"):
        table.add_column(column, justify="left" if column in ("variant", "weight status") else "right")
    for variant, stat in stats.items():
        errors = _num(None if stat.error_rate is None else 100 * stat.error_rate, ".1f")
        table.add_row(
            variant,
            f"{weights.get(variant, '-')}%",
            _num(stat.rate, ".1f"),
            errors if errors == "-" else f"{errors}%",
            _num(None if stat.ttft_p95 is None else 1000 * stat.ttft_p95, ".0f") + " ms",
            stat.weight_status,
        )
    return table


def rollout_lines(rollout: RolloutStatus) -> Text:
    phase = rollout.phase
    where = rollout.label
    if phase == "progressing":
        where = f"step {rollout.step + 1} of {rollout.steps}"
    text = Text()
    text.append("phase     ")
    text.append(f"{phase}", style=f"bold {PHASE_STYLE.get(phase, '')}")
    text.append(f"  {where}: {weight_text(rollout)}")
    hold = rollout.hold
    if hold.needed is not None:
        text.append(f"   hold {hold.elapsed:.0f}s of {hold.needed:.0f}s")
    if rollout.shadow_percent:
        text.append(f"\nshadow    Envoy mirrors {rollout.shadow_percent}% of requests to {rollout.candidate}")
    if rollout.capacity:
        text.append("\n" + "\n".join(capacity_lines(rollout.capacity)))
    decision = rollout.last_decision
    if decision:
        text.append(f"\nanalysis  {decision.outcome or '-'}")
        for check in decision.checks:
            verdict = check.verdict
            style = {"pass": "green", "fail": "bold red"}.get(verdict, "yellow")
            text.append(f"\n  {check.name:<14}")
            text.append(f"{verdict.upper():<13}", style=style)
            text.append(f"value {_num(check.value, '.4g')} over {check.samples} samples")
    if rollout.rollback_in_flight:
        text.append("\nrollback  waiting for every proxy to ACK", style="bold red")
    elif rollout.last_rollback_seconds is not None:
        seconds = rollout.last_rollback_seconds
        text.append(
            f"\nrollback  ACKed by every proxy {1000 * seconds:.1f} ms after the decision", style="red"
        )
    return text


def gateway_line(status: Status) -> Text:
    """Whether every Envoy has ACKed, and whether the spec file's last edit was refused."""
    xds, error = status.xds, status.spec.last_error
    converged = "converged" if xds.converged else "NOT converged"
    text = Text(f"proxies   {len(xds.proxies)} connected, {converged}")
    if error:
        text.append(f"\nspec      REFUSED, last good still live: {error.message}", style="bold red")
    return text


def render(
    title: str, elapsed: float, status: Status | None, stats: dict[str, VariantStats], note: str
) -> RenderableType:
    """One frame of the live view (the rollout's lines where the gateway runs a rollout controller)."""
    if status is None:
        body: RenderableType = Text("waiting for the gateway ...")
    else:
        rollout = rollout_lines(status.rollout) if isinstance(status.rollout, RolloutSection) else Text()
        body = Group(rollout, gateway_line(status), Text(""), variant_table(status, stats))
    return Panel(
        Group(body, Text(note, style="dim")),
        title=f"{title}  t+{elapsed:.0f}s",
        title_align="left",
    )


def watch_stack(client: AdminClient, stack: dict[str, Any], interval: float) -> None:
    """`graystack status --watch` beside a running `graystack up`: the live view until Ctrl-C."""
    meter = VariantMeter(stack["model_servers"], stack["probes"])
    note = f"Envoy {stack['envoy_url']}   logs {stack['logs']}   Ctrl-C leaves (the stack keeps running)"
    try:
        with Live(console=Console(), auto_refresh=False) as live:
            while True:
                try:
                    status = client.status()
                except AdminError:
                    status = None
                elapsed = time.time() - stack["started_at"]
                live.update(render("graystack status", elapsed, status, meter.read(), note), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        meter.close()
