"""What the gateway measured of the run's answers, per variant, for the end summary: every answer Envoy
saw, whichever server gave it (gateway/answers/), as the gateway's /metrics holds it at the start of
the run and at its end. Its TTFT and time per output token come from histogram buckets (the model
servers' edges, 1.2 apart), so a percentile is good to about 20 %; its counts are exact. Other traffic
through the same gateway during the run is counted too."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gateway.families import ANSWERS, GEN_AI_TOKEN_USAGE, GEN_AI_TPOT, GEN_AI_TTFT
from graystack.console.live_metrics import bucket_quantile


@dataclass
class Readings:
    """Cumulative, as read: per variant, TTFT and time-per-output-token buckets (le -> count, summed over
    segments and prompt buckets), answers by ending, answers that stopped on `length`, output tokens."""

    ttft: defaultdict[str, Counter[float]] = field(default_factory=lambda: defaultdict(Counter))
    itl: defaultdict[str, Counter[float]] = field(default_factory=lambda: defaultdict(Counter))
    endings: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    length: Counter[str] = field(default_factory=Counter)
    output_tokens: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class GatewayStats:
    variant: str
    answers: int
    endings: dict[str, int]  # complete, error, cut, client_gone
    length_share: float  # of its answers, those that stopped on max_tokens
    output_tokens: int
    ttft: dict[str, float]  # "p50", "p95", "p99": seconds (absent: no observation)
    itl: dict[str, float]


def read(text: str) -> Readings:
    """The gateway's /metrics page, read."""
    found = Readings()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            variant = sample.labels.get("variant")
            if variant is None:
                continue
            if sample.name == f"{GEN_AI_TTFT}_bucket":
                found.ttft[variant][float(sample.labels["le"])] += int(sample.value)
            elif sample.name == f"{GEN_AI_TPOT}_bucket":
                found.itl[variant][float(sample.labels["le"])] += int(sample.value)
            elif sample.name == ANSWERS:
                found.endings[variant][sample.labels["ending"]] += int(sample.value)
                if sample.labels["finish"] == "length":
                    found.length[variant] += int(sample.value)
            elif (
                sample.name == f"{GEN_AI_TOKEN_USAGE}_sum" and sample.labels["gen_ai_token_type"] == "output"
            ):
                found.output_tokens[variant] += int(sample.value)
    return found


def measured(before: Readings, after: Readings) -> list[GatewayStats]:
    """What the run added, per variant that answered during it."""
    stats = []
    for variant in sorted(after.endings):
        endings = after.endings[variant] - before.endings.get(variant, Counter())
        answers = sum(endings.values())
        if not answers:
            continue
        stats.append(
            GatewayStats(
                variant=variant,
                answers=answers,
                endings=dict(endings),
                length_share=(after.length[variant] - before.length[variant]) / answers,
                output_tokens=after.output_tokens[variant] - before.output_tokens[variant],
                ttft=_quantiles(before.ttft.get(variant, Counter()), after.ttft[variant], (0.5, 0.95, 0.99)),
                itl=_quantiles(before.itl.get(variant, Counter()), after.itl[variant], (0.5, 0.95)),
            )
        )
    return stats


def _quantiles(before: Counter[float], after: Counter[float], qs: tuple[float, ...]) -> dict[str, float]:
    buckets = sorted((le, float(after[le] - before.get(le, 0))) for le in after)
    found = {f"p{round(q * 100)}": bucket_quantile(q, buckets) for q in qs}
    return {name: value for name, value in found.items() if value is not None}
