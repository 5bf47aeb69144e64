"""ttft_vs_baseline and itl_vs_baseline: the candidate's latency at most max_latency_ratio times the
baseline's, in distribution. Pure. Two rows of one kind, one per signal, each with its own tests.

Both variants' histograms per randomised stratum (or with `latency_source: answers` each answer's exact
value), in looks where the candidate's pods were, with confidence, not busier than the baseline's
(MAX_LOAD_RATIO, on request counts per pod summed over about LOAD_LOOKS looks, since a look holds too
few long streams to say, and bounded from above, since a rollout's first looks hold a handful): a split
of 70/30 over one pod each loads the candidate's pod 2.3 times as much, and its queues, not its code,
would make it slower. Which looks count depends on request counts alone, never on the latencies, so
the tests stay valid; a lightly loaded candidate that is still slower is all the more evidence. Where
the servers export no TTFT histogram (llama.cpp, `transformers serve`), TTFT is compared on the
probes' synthetic requests (the same one to every pod) instead. Inter-token latency is each request's
mean gap, observed once per request: the tests' validity rests on each observation's variant being
chosen at random, which holds for a request, not for its tokens, whose gaps share one server moment
(counted per token, a healthy candidate's 173 gaps once passed for strong evidence in CI and rolled it
back; bench/itl_units.py measures both units).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from gateway.metrics.observations import ITL, ITL_SUM, TTFT, TTFT_SUM
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import (
    NO_LATENCY,
    answered,
    fired,
    measurements_missing,
    observed,
    probed,
    randomised,
)
from gateway.rollout.increments import Histogram, VariantLook
from gateway.rollout.sequential import ExactShiftTest, ShiftTest, by_stratum
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

TTFT_VS_BASELINE = "ttft_vs_baseline"
ITL_VS_BASELINE = "itl_vs_baseline"
MAX_LOAD_RATIO = 1.25  # candidate requests per pod over the baseline's, above which latency is not compared
LOAD_LOOKS = 30  # the request counts' smoothing, in looks
LOAD_Z = 2.0  # latency is compared only where the load ratio's bound, this many sigmas up, is below the max


@dataclass(frozen=True)
class LatencySettings:
    max_ratio: float


@dataclass(frozen=True)
class LatencyTests:
    shift: ShiftTest | None = None  # on histograms (None until both variants' edges are known)
    exact: ExactShiftTest | None = None  # on the answers' exact values (latency_source: answers)
    seen: int = 0  # candidate observations compared, randomised strata
    probed: int = 0  # of those, the probes' (TTFT from servers with no TTFT histogram)
    busier_looks: int = 0  # looks with candidate requests left out (its pods were busier)
    load: tuple[float, float] = (0.0, 0.0)  # candidate's and baseline's requests, decayed sums
    answered: int = 0  # candidate answers the gateway measured (latency_source: answers)
    sent: int = 0  # ... and its requests as Envoy counted them
    kind: Literal["latency"] = "latency"


@dataclass(frozen=True)
class LatencyComparison:
    """The comparison on `signal` (TTFT or ITL); TTFT falls back to the probes' requests."""

    name: str
    signal: str
    what: str  # how its reason names the latency

    @property
    def checks(self) -> tuple[str, ...]:
        return (self.name,)

    @property
    def signals(self) -> tuple[str, ...]:
        return (TTFT, TTFT_SUM) if self.signal == TTFT else (ITL, ITL_SUM)

    budgeted = True
    detectors = 1

    def settings(self, spec: RolloutSpec) -> LatencySettings | Off:
        most = spec.analysis.max_latency_ratio
        return Off("max_latency_ratio is null") if most is None else LatencySettings(most)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        return {"max_latency_ratio": spec.analysis.max_latency_ratio}

    def start(self, settings: LatencySettings) -> LatencyTests:
        return LatencyTests()

    def add(
        self,
        tests: LatencyTests,
        settings: LatencySettings,
        plan: Plan,
        ours: VariantLook,
        theirs: VariantLook,
    ) -> LatencyTests:
        values = ours.ttft_values if self.signal == TTFT else ours.itl_values
        if plan.exact_latency:
            tests = replace(
                tests, answered=tests.answered + answered(ours.ttft_values), sent=tests.sent + ours.requests
            )
        tests = replace(tests, load=smoothed_load(tests.load, ours, theirs))
        if load_ratio_bound(tests.load, ours, theirs) > MAX_LOAD_RATIO:
            return replace(tests, busier_looks=tests.busier_looks + (ours.requests > 0))
        if plan.exact_latency:
            theirs_values = theirs.ttft_values if self.signal == TTFT else theirs.itl_values
            strata = by_stratum(randomised(values, plan), randomised(theirs_values, plan))
            test = tests.exact or ExactShiftTest.new(settings.max_ratio - 1)
            return replace(
                tests, exact=test.update(strata), seen=tests.seen + sum(len(mine) for mine, _ in strata)
            )
        mine, other, from_probes = self._compared(ours, theirs, plan)
        seen = round(sum(h.total for h in mine.values()))
        return replace(
            tests,
            shift=_shift(tests.shift, settings.max_ratio, mine, other),
            seen=tests.seen + seen,
            probed=tests.probed + seen * from_probes,
        )

    def _compared(
        self, ours: VariantLook, theirs: VariantLook, plan: Plan
    ) -> tuple[dict[str, Histogram], dict[str, Histogram], bool]:
        """What the comparison reads this look, and whether it is the probes': the servers' randomised
        traffic, else for TTFT the probes' requests where the servers observed none (servers that export
        no TTFT histogram, vLLM's aside, still get compared on what the probes measure)."""
        if self.signal == ITL:
            return randomised(ours.itl, plan), randomised(theirs.itl, plan), False
        mine, other = randomised(ours.ttft, plan), randomised(theirs.ttft, plan)
        if observed(mine) and observed(other):
            return mine, other, False
        return probed(ours.ttft), probed(theirs.ttft), True

    def verdicts(
        self, tests: LatencyTests, settings: LatencySettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        """Fails when its e-value or its change detector crosses its bound."""
        threshold = settings.max_ratio
        ratio = moment.latency_ratio if self.signal == TTFT else None
        if missing := measurements_missing(plan, tests.answered, tests.sent):
            return [Check(self.name, Verdict.INCONCLUSIVE, None, 0, None, threshold, missing)]
        busier = (
            f"; {tests.busier_looks} looks left out (the candidate's pods were busier than the baseline's)"
            if tests.busier_looks
            else ""
        )
        test = tests.exact if plan.exact_latency else tests.shift
        if test is None or not tests.seen:
            why = NO_LATENCY.format(what=f"{self.what} latency") + busier
            return [Check(self.name, Verdict.PASS, ratio, 0, None, threshold, why)]
        changed = fired(test.log_detector, plan.log_detector_bound)
        failing = changed or fired(test.log_evalue, plan.log_bound)
        source = (
            f" ({tests.probed} from the probes' requests: the servers export no TTFT histogram)"
            if tests.probed
            else ""
        )
        if plan.exact_latency:
            source = " (each answer's exact time, as the gateway measured it)"
        reason = (
            f"{self.what} latency {'more' if failing else 'not shown more'} than {threshold:g}x the baseline's "
            f"in distribution over {tests.seen} candidate samples{source}: log e-value {test.log_evalue:.2f} vs "
            f"{plan.log_bound:.2f}, change detector {test.log_detector:.2f} vs {plan.log_detector_bound:.2f}{busier}"
        )
        verdict = Verdict.FAIL if failing else Verdict.PASS
        # the evidence shown is the statistic that fired (the detector where it did), else the e-value
        shown, bound = (
            (test.log_detector, plan.log_detector_bound) if changed else (test.log_evalue, plan.log_bound)
        )
        return [Check(self.name, verdict, ratio, tests.seen, None, threshold, reason, shown, bound)]


def smoothed_load(load: tuple[float, float], ours: VariantLook, theirs: VariantLook) -> tuple[float, float]:
    """The candidate's and the baseline's request counts, summed with a decay of about LOAD_LOOKS looks."""
    decay = 1 - 1 / LOAD_LOOKS
    mine, others = load
    return decay * mine + ours.requests, decay * others + theirs.requests


def load_ratio_bound(load: tuple[float, float], ours: VariantLook, theirs: VariantLook) -> float:
    """An upper bound on the candidate's requests per pod over the baseline's (pods unknown count as
    one): the ratio of the decayed sums, LOAD_Z sigmas up on the log scale. A decayed sum of Poisson
    counts has the spread of a count twice its size, so a handful of requests, as in a rollout's
    first looks, bounds nothing (infinity where either variant has had none)."""
    mine, theirs_ = load
    if mine <= 0 or theirs_ <= 0:
        return math.inf
    ratio = (mine / max(ours.pods, 1)) / (theirs_ / max(theirs.pods, 1))
    return ratio * math.exp(LOAD_Z * math.sqrt(1 / (2 * mine) + 1 / (2 * theirs_)))


def _shift(
    test: ShiftTest | None, max_ratio: float, ours: Mapping[str, Histogram], theirs: Mapping[str, Histogram]
) -> ShiftTest | None:
    """The shift test after this look: strata both variants observed, on the edges both share. The
    edges are fixed when the test starts (from the histograms' layout, never from their counts)."""
    shared = [name for name in sorted(ours) if name in theirs and ours[name].total and theirs[name].total]
    if test is None:
        edges = _common_edges([ours[name] for name in shared] + [theirs[name] for name in shared])
        if not edges:
            return None
        test = ShiftTest.new(edges, max_ratio - 1)
    strata = []
    for name in shared:
        mine, others = _aligned(ours[name], test.edges), _aligned(theirs[name], test.edges)
        if mine is not None and others is not None:
            strata.append((mine, others))
    return test.update(strata) if strata else test


def _common_edges(histograms: Sequence[Histogram]) -> tuple[float, ...]:
    if not histograms:
        return ()
    common = set(histograms[0].edges)
    for histogram in histograms[1:]:
        common &= set(histogram.edges)
    return tuple(sorted(common))


def _aligned(histogram: Histogram, edges: Sequence[float]) -> list[float] | None:
    """Cumulative counts at `edges`, then the total; None if the histogram lacks one of them."""
    if not set(edges) <= set(histogram.edges):
        return None
    return [histogram.counts[histogram.edges.index(edge)] for edge in edges] + [histogram.total]


TTFT_COMPARISON = LatencyComparison(TTFT_VS_BASELINE, TTFT, "first-token")
ITL_COMPARISON = LatencyComparison(ITL_VS_BASELINE, ITL, "inter-token")
