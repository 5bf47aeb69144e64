"""The end-of-run summary and its verdict: per-variant latency percentiles, the error budget, the split
against the configured weights, optional latency objectives. The verdict becomes Locust's exit code:
0 pass, 1 fail (budget, split, objective, or user code that raised), 2 inconclusive (no request
answered, or nothing to compare the split with when a check of it was asked for)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtests.conversation import Stickiness
from loadtests.measured import GatewayStats
from loadtests.split import SplitResult

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 2}
LATENCIES = ("ttft", "inter_token", "e2e")  # the Locust entry types the users fire, per variant


@dataclass(frozen=True)
class Objectives:
    max_error_rate: float = 0.003
    max_ttft_p95: float | None = None  # seconds; None: not checked
    max_e2e_p99: float | None = None
    split_required: bool = False  # fail as inconclusive when no period could be compared


@dataclass(frozen=True)
class VariantStats:
    variant: str
    requests: int
    failures: int
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> {"p50": seconds, ...}

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


@dataclass
class Summary:
    variants: list[VariantStats]
    requests: int
    failures: int
    user_exceptions: int
    split: SplitResult | None
    objectives: Objectives
    gateway: list[GatewayStats] | None = None  # what the gateway measured (None: no admin URL to read)
    conversations: Stickiness | None = None  # the conversation users' turns (None: none ran)
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def judge(summary: Summary) -> Summary:
    """Fill in the verdict and the reasons for it."""
    o = summary.objectives
    fails, unsure = [], []
    if summary.requests == 0:
        unsure.append("no request was answered")
    if summary.requests and summary.failures / summary.requests > o.max_error_rate:
        fails.append(
            f"error rate {summary.failures / summary.requests:.3%} above the {o.max_error_rate:.3%} budget"
        )
    for stats in summary.variants:
        if stats.requests and stats.error_rate > o.max_error_rate:
            fails.append(f"{stats.variant}: error rate {stats.error_rate:.3%} above the budget")
        fails += _objective(stats, "ttft", "p95", o.max_ttft_p95)
        fails += _objective(stats, "e2e", "p99", o.max_e2e_p99)
    if summary.user_exceptions:
        fails.append(f"the load test's own code raised {summary.user_exceptions} time(s)")
    split = summary.split
    if split is not None and not split.ok:
        wrong = [c for c in split.checks if not c.ok]
        fails.append(f"split: {len(wrong)} of {len(split.checks)} shares outside their interval")
    if o.split_required and (split is None or not split.checks):
        unsure.append("the split could not be compared with the configured weights")
    summary.verdict = "fail" if fails else "inconclusive" if unsure else "pass"
    summary.reasons = fails + unsure
    return summary


def _objective(stats: VariantStats, kind: str, percentile: str, limit: float | None) -> list[str]:
    value = stats.latency.get(kind, {}).get(percentile)
    if limit is None or value is None or value <= limit:
        return []
    return [f"{stats.variant}: {kind} {percentile} {value:.3f}s above the {limit:.3f}s objective"]


def _ms(values: dict[str, float], keys: tuple[str, ...]) -> str:
    return "/".join("-" if values.get(k) is None else f"{values[k] * 1000:.0f}" for k in keys)


def render(summary: Summary, started: float) -> str:
    """The summary as the text printed at the end of the run (times relative to `started`)."""
    rate = summary.failures / summary.requests if summary.requests else 0.0
    budget = summary.objectives.max_error_rate
    lines = [
        f"graystack load test: {summary.verdict.upper()} (exit {summary.exit_code})",
        f"requests {summary.requests}, failed {summary.failures} ({rate:.3%}; budget {budget:.3%})",
        f"{'variant':<12}{'requests':>9}{'failed':>8}  {'TTFT p50/95/99 ms':<20}{'E2E p50/95/99 ms':<20}ITL p50/95 ms",
    ]
    for s in summary.variants:
        ttft = _ms(s.latency.get("ttft", {}), ("p50", "p95", "p99"))
        e2e = _ms(s.latency.get("e2e", {}), ("p50", "p95", "p99"))
        itl = _ms(s.latency.get("inter_token", {}), ("p50", "p95"))
        lines.append(f"{s.variant:<12}{s.requests:>9}{s.failures:>8}  {ttft:<20}{e2e:<20}{itl}")
    lines += _gateway_lines(summary.gateway)
    if summary.conversations is not None:
        lines.append(_conversation_line(summary.conversations))
    split = summary.split
    if split is None:
        lines.append("split: not checked (no admin URL and no expected weights)")
    else:
        lines.append(
            f"split: {split.periods} weight period(s), {split.counted} requests compared, {split.excluded} "
            f"left out near flips, {split.cut_off} sent after the first stream still open at the end; "
            f"exact intervals, family-wise alpha {split.alpha}"
        )
        for c in split.checks:
            start = "start" if c.start <= started else f"{c.start - started:+.1f}s"
            end = "end" if c.end is None else f"{c.end - started:+.1f}s"
            lines.append(
                f"  period {c.period} {start}..{end} client {c.client_type} {c.variant}: "
                f"configured {c.expected:.1%}, observed {c.share:.1%} ({c.observed}/{c.requests}), "
                f"interval [{c.lower:.1%}, {c.upper:.1%}] {'ok' if c.ok else 'OFF'}"
            )
    lines += [f"verdict: {summary.verdict}", *(f"  - {reason}" for reason in summary.reasons)]
    return "\n".join(lines)


def _conversation_line(turns: Stickiness) -> str:
    """How often a conversation's turn reached the variant, and the pod, of its previous turn."""
    if not turns.turns:
        return "conversations: no turn after a first was answered"
    line = (
        f"conversations: of {turns.turns} turns after a first, {turns.variant_share:.1%} reached the variant "
        f"of the previous turn"
    )
    if turns.pod_share is None:
        return line + "; pods: not named by the servers"
    return line + f", {turns.pod_share:.1%} its pod ({turns.same_pod}/{turns.pod_turns} named)"


def _gateway_lines(gateway: list[GatewayStats] | None) -> list[str]:
    if gateway is None:
        return ["as the gateway measured: not read (no admin URL)"]
    lines = [
        "as the gateway measured every answer (any server; buckets 1.2 apart):",
        f"  {'variant':<12}{'answers':>8}  {'TTFT p50/95/99 ms':<20}{'ITL p50/95 ms':<16}"
        f"{'error/cut/gone':<16}{'length':>7}{'out tokens':>12}",
    ]
    for g in gateway:
        ended = "/".join(str(g.endings.get(e, 0)) for e in ("error", "cut", "client_gone"))
        lines.append(
            f"  {g.variant:<12}{g.answers:>8}  {_ms(g.ttft, ('p50', 'p95', 'p99')):<20}"
            f"{_ms(g.itl, ('p50', 'p95')):<16}{ended:<16}{g.length_share:>7.1%}{g.output_tokens:>12}"
        )
    return lines


def write(summary: Summary, started: float, folder: Path) -> None:
    """summary.txt and summary.json into the run folder, beside Locust's CSV and HTML."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.txt").write_text(render(summary, started) + "\n")
    body = asdict(summary)
    if summary.conversations is not None:
        body["conversations"].update(
            variant_share=summary.conversations.variant_share, pod_share=summary.conversations.pod_share
        )
    body["exit_code"] = summary.exit_code
    body["started"] = started
    if summary.split is not None:
        body["split"]["ok"] = summary.split.ok
        for check, data in zip(summary.split.checks, body["split"]["checks"], strict=True):
            data["ok"] = check.ok
    (folder / "summary.json").write_text(json.dumps(body, indent=2))
