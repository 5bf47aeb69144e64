"""ttft_p95: the candidate's first tokens above max_ttft_p95, against a 5 % share (p95 <= SLO). Pure.

With `latency_source: answers`, each measured answer's own time; else above the smallest histogram edge
at or above the SLO (exact on graystack's servers, whose buckets have the SLO's edge; conservative
where a server's buckets do not), the servers' strata where they export any, else the probes' synthetic
requests. The same test on the baseline's first tokens tells a shared incident.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from gateway.metrics.observations import TTFT, segment_of
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import (
    NO_LATENCY,
    answered,
    baseline_fired,
    measurements_missing,
    observed,
    probed,
    threshold_check,
)
from gateway.rollout.increments import Histogram, VariantLook
from gateway.rollout.sequential import ThresholdTest
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec
from gateway.spec.queries import PROBED

TTFT_P95 = "ttft_p95"
TTFT_SHARE = 0.05  # p95 <= SLO: at most 5 % of first tokens above it


@dataclass(frozen=True)
class SloSettings:
    max_ttft_p95: float


@dataclass(frozen=True)
class SloTests:
    candidate: ThresholdTest
    baseline: ThresholdTest
    edge: float | None = None  # the edge the test counts above (fixed by the first histogram with one)
    answered: int = 0  # candidate answers the gateway measured (latency_source: answers)
    sent: int = 0  # ... and its requests as Envoy counted them
    kind: Literal["ttft_p95"] = "ttft_p95"


class TtftSlo:
    name = TTFT_P95
    checks = (TTFT_P95,)
    signals = (TTFT,)
    budgeted = True
    detectors = 0

    def settings(self, spec: RolloutSpec) -> SloSettings | Off:
        slo = spec.analysis.max_ttft_p95
        return Off("max_ttft_p95 is null") if slo is None else SloSettings(slo)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        return {"max_ttft_p95": spec.analysis.max_ttft_p95}

    def start(self, settings: SloSettings) -> SloTests:
        return SloTests(ThresholdTest.new(TTFT_SHARE), ThresholdTest.new(TTFT_SHARE))

    def add(
        self, tests: SloTests, settings: SloSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> SloTests:
        slo = settings.max_ttft_p95
        if plan.exact_latency:  # each answer's own time: the SLO itself is the edge
            return replace(
                tests,
                edge=slo,
                candidate=tests.candidate.update(*_slower(ours.ttft_values, slo)),
                baseline=tests.baseline.update(*_slower(theirs.ttft_values, slo)),
                answered=tests.answered + answered(ours.ttft_values),
                sent=tests.sent + ours.requests,
            )
        mine, other = _served(ours.ttft), _served(theirs.ttft)
        edge = tests.edge
        if edge is None:
            edges = sorted({e for h in mine.values() for e in h.edges if e >= slo * (1 - 1e-6)})
            if not edges:
                return tests
            edge = edges[0]
        return replace(
            tests,
            edge=edge,
            candidate=tests.candidate.update(*_slow(mine, edge)),
            baseline=tests.baseline.update(*_slow(other, edge)),
        )

    def verdicts(self, tests: SloTests, settings: SloSettings, plan: Plan, moment: Moment) -> Sequence[Check]:
        test = tests.candidate
        if missing := measurements_missing(plan, tests.answered, tests.sent):
            return [Check(TTFT_P95, Verdict.INCONCLUSIVE, None, 0, None, test.p0, missing)]
        if not test.requests or tests.edge is None:
            return [Check(TTFT_P95, Verdict.PASS, None, 0, None, test.p0, NO_LATENCY.format(what="TTFT"),
                          test.log_evalue, plan.log_bound)]  # fmt: skip
        edge, slo = tests.edge, settings.max_ttft_p95
        exact = "" if abs(edge - slo) < 1e-6 * edge else f" (the histogram's next edge, {edge:g}s)"
        if plan.exact_latency:
            exact = " (each answer's exact time, as the gateway measured it)"
        reason = (
            f"{test.events} of {test.requests} first tokens slower than {edge:g}s{exact}, p95 SLO "
            f"{slo:g}s: log e-value {test.log_evalue:.2f} vs {plan.log_bound:.2f}"
        )
        return [threshold_check(TTFT_P95, test, plan, baseline_fired(plan, tests.baseline), reason)]


def _served(strata: Mapping[str, Histogram]) -> dict[str, Histogram]:
    """The servers' strata where they have any, else the probes' (the SLO test's first tokens)."""
    servers = {name: h for name, h in strata.items() if segment_of(name) != PROBED}
    return servers if observed(servers) else probed(strata)


def _slow(strata: Mapping[str, Histogram], edge: float) -> tuple[int, int]:
    """(first tokens, of those above `edge`) over the strata that have that edge."""
    having = [h for h in strata.values() if edge in h.edges]
    total = round(sum(h.total for h in having))
    return total, min(total, round(sum(h.above(edge) for h in having)))


def _slower(strata: Mapping[str, Sequence[float]], slo: float) -> tuple[int, int]:
    """(first tokens, of those slower than `slo`) over every stratum of measured answers."""
    values = [value for stratum in strata.values() for value in stratum]
    return len(values), sum(value > slo for value in values)
