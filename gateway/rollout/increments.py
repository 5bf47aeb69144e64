"""One look's increments: what each variant did since the previous look, from cumulative counters. Pure.

The sequential tests (gateway/rollout/evidence.py) consume counts per look, never a sliding window.
A provider reports every counter series as it stands (gateway/metrics/observations.py); here the
increase is taken series by series and summed per (variant, signal, stratum, le):
- a series whose value fell was reset (its process restarted): its new value is the increase since;
- a series first seen after an earlier look counts from 0 (Envoy creates `upstream_rq{code="503"}`
  on the first 503: that first failure is exactly what a rollback waits for);
- the first look (no previous one) only sets the start: nothing is counted, since a counter's total
  at the gateway's start holds traffic from before this rollout, or from before a restart whose
  evidence the rollout state already holds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.metrics.observations import (
    COMPARED,
    CUT,
    DIFFERED,
    ERRORS,
    GENERATED,
    ITL,
    ITL_SUM,
    JUDGED,
    LOST,
    MALFORMED,
    REQUESTS,
    STRUCTURED,
    TIED,
    TTFT,
    TTFT_SUM,
    UNIT_ERRORS,
    UNITS,
    CounterKey,
    SampleKey,
)

Counters = Mapping[CounterKey, float]


def increase(previous: Counters | None, current: Counters) -> dict[tuple[str, str, str, float], float]:
    """Per (variant, signal, stratum, le): the summed increase of its series since `previous`."""
    totals: dict[tuple[str, str, str, float], float] = defaultdict(float)
    if previous is None:
        return totals
    for key, value in current.items():
        before = previous.get(key, 0.0)
        totals[key.variant, key.signal, key.stratum, key.le] += value - before if value >= before else value
    return totals


@dataclass(frozen=True)
class Histogram:
    """A histogram's increments in one stratum: cumulative counts at each finite edge, and the total."""

    edges: tuple[float, ...] = ()
    counts: tuple[float, ...] = ()  # observations <= edges[i]
    total: float = 0.0
    seconds: float = 0.0  # the sum of the observations

    def above(self, edge: float) -> float:
        """Observations above `edge` (one of `edges`)."""
        return self.total - self.counts[self.edges.index(edge)]


@dataclass(frozen=True)
class VariantLook:
    """One variant over one look."""

    requests: int = 0
    errors: int = 0
    compared: int = 0
    differed: int = 0
    ttft: Mapping[str, Histogram] = field(default_factory=dict)  # by stratum
    itl: Mapping[str, Histogram] = field(default_factory=dict)
    pods: int = 0  # model servers reporting latency for it (0: unknown)
    generated: int = 0  # tokens its servers generated
    # exact per-request values measured this look, by stratum (gateway/metrics/answered.py)
    ttft_values: Mapping[str, Sequence[float]] = field(default_factory=dict)
    itl_values: Mapping[str, Sequence[float]] = field(default_factory=dict)
    # with cohorts, the observations the error tests count: each client once (metrics/client_units.py)
    units: int = 0
    unit_errors: int = 0
    # captured answers whose form was checked, those malformed and those cut at the token limit, by
    # segment (quality/counts.py)
    structure: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    # the judge's verdicts on its shadow pairs: decisive ones, the candidate's losses, ties
    judged: int = 0
    lost: int = 0
    tied: int = 0

    def counted(self, client_units: bool) -> tuple[int, int]:
        """(observations, failed ones) as the error tests count them: requests, or clients with cohorts."""
        return (self.units, self.unit_errors) if client_units else (self.requests, self.errors)


def pods(counters: Counters, variant: str) -> int:
    """How many pods (model servers) report latency for `variant` now: 0 where none does."""
    return len({key.pod for key in counters if key.variant == variant and key.pod})


def per_variant(
    totals: Mapping[tuple[str, str, str, float], float],
    variants: Iterable[str],
    current: Counters | None = None,
    samples: Mapping[SampleKey, Sequence[float]] | None = None,
) -> dict[str, VariantLook]:
    """The look's increments arranged per variant; counts are whole (errors capped at requests: with
    more than one retry a failed fallback is charged to the variant too, gateway/metrics/direct.py);
    `current`: the look's counters, for how many pods serve each variant; `samples`: the look's exact
    per-request values."""
    scalars: dict[tuple[str, str], float] = defaultdict(float)
    forms: dict[tuple[str, str, str], float] = defaultdict(float)
    buckets: dict[tuple[str, str, str], dict[float, float]] = defaultdict(dict)
    sums: dict[tuple[str, str, str], float] = defaultdict(float)
    for (variant, signal, stratum, le), value in totals.items():
        if signal in (TTFT, ITL):
            buckets[variant, signal, stratum][le] = value
        elif signal in (TTFT_SUM, ITL_SUM):
            sums[variant, signal.removesuffix("_sum"), stratum] += value
        elif signal in (STRUCTURED, MALFORMED, CUT):
            forms[variant, signal, stratum] += value
        else:
            scalars[variant, signal] += value
    looks = {}
    for variant in variants:
        requests = round(scalars[variant, REQUESTS])
        histograms = {
            signal: {
                stratum: _histogram(counts, sums[variant, signal, stratum])
                for (v, s, stratum), counts in buckets.items()
                if v == variant and s == signal
            }
            for signal in (TTFT, ITL)
        }
        exact = {
            signal: {
                k.stratum: v for k, v in (samples or {}).items() if (k.variant, k.signal) == (variant, signal)
            }
            for signal in (TTFT, ITL)
        }
        compared = round(scalars[variant, COMPARED])
        units = round(scalars[variant, UNITS])
        looks[variant] = VariantLook(
            requests=requests,
            errors=min(round(scalars[variant, ERRORS]), requests),
            compared=compared,
            differed=min(round(scalars[variant, DIFFERED]), compared),
            ttft=histograms[TTFT],
            itl=histograms[ITL],
            pods=pods(current or {}, variant),
            generated=round(scalars[variant, GENERATED]),
            ttft_values=exact[TTFT],
            itl_values=exact[ITL],
            units=units,
            unit_errors=min(round(scalars[variant, UNIT_ERRORS]), units),
            structure=_forms(forms, variant),
            judged=round(scalars[variant, JUDGED]),
            lost=min(round(scalars[variant, LOST]), round(scalars[variant, JUDGED])),
            tied=round(scalars[variant, TIED]),
        )
    return looks


def _forms(forms: Mapping[tuple[str, str, str], float], variant: str) -> dict[str, tuple[int, int, int]]:
    """Per segment, (answers checked, malformed ones, cut ones) for `variant`, where it had any."""
    checked = {
        segment: round(n) for (v, signal, segment), n in forms.items() if (v, signal) == (variant, STRUCTURED)
    }
    return {
        segment: (
            n,
            min(n, round(forms.get((variant, MALFORMED, segment), 0.0))),
            min(n, round(forms.get((variant, CUT, segment), 0.0))),
        )
        for segment, n in checked.items()
        if n > 0
    }


def _histogram(counts: Mapping[float, float], seconds: float) -> Histogram:
    edges = tuple(sorted(le for le in counts if not math.isinf(le)))
    cumulative, highest = [], 0.0
    for edge in edges:  # separately reset buckets can dip below a lower one: keep them cumulative
        highest = max(highest, counts[edge])
        cumulative.append(highest)
    total = max(counts.get(math.inf, 0.0), highest)
    return Histogram(edges, tuple(cumulative), total, seconds)
