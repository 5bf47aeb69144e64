"""The rollout's evidence: its sequential tests' states, carried from look to look. Pure.

Each look adds one look's increments (gateway/rollout/increments.py) to every test the plan runs
(gateway/rollout/plan.py). The few hundred numbers here live in the rollout state, so a restarted
gateway or a new leader continues the same tests instead of starting over (a state that was lost
starts new tests, which the controller logs). Tests are never reset when a stage changes: an
e-process's guarantee covers the whole rollout, for any look schedule and any weight schedule, and a
restart per stage would spend the budget again. They restart on `retry`, on a new candidate, or when
the settings that define them change (the plan's key).

What each test sees, per look:
- error_rate / error_rate_change: the candidate's attempts and failed attempts (Envoy's cluster
  counters: a failure hidden by the fallback retry still counts; and the answers the gateway measured
  failing after their `200`, gateway/metrics/answered.py), against max_error_rate; the same
  tests on the baseline's own counts tell a shared incident from the candidate's;
- error_ratio: both variants' counts, the look's realised share as the null;
- ttft_p95: the candidate's first tokens above max_ttft_p95, against a 5 % share; the baseline's
  likewise. With plan.exact_latency, each measured answer's own time; else above the smallest histogram
  edge at or above the SLO (exact on graystack's servers, whose buckets have the SLO's edge;
  conservative where a server's buckets do not), routed traffic only;
- ttft_vs_baseline, itl_vs_baseline: both variants' histograms, per randomised stratum, in looks where
  the candidate's pods were, with confidence, not busier than the baseline's (MAX_LOAD_RATIO, on
  request counts per pod summed over about LOAD_LOOKS looks, since a look holds too few long streams
  to say, and bounded from above, since a rollout's first looks hold a handful): a split of 70/30
  over one pod each loads the candidate's pod 2.3 times as much, and its queues, not its code, would
  make it slower. Which looks count depends on request counts alone, never on the latencies, so
  the tests stay valid; a lightly loaded candidate that is still slower is all the more evidence.
  Where the servers export no TTFT histogram (llama.cpp, `transformers serve`), TTFT is compared, and
  the SLO tested, on the probes' synthetic requests (the same one to every pod) instead. Inter-token
  latency is each request's mean gap, observed once per request: the tests' validity rests on each
  observation's variant being chosen at random, which holds for a request, not for its tokens, whose
  gaps share one server moment (counted per token, a healthy candidate's 173 gaps once passed for
  strong evidence in CI and rolled it back; bench/itl_units.py measures both units);
- shadow_agreement: the candidate's compared shadow answers and those that differed;
- structure: the captured answers whose form was checked and the malformed ones, both variants', per
  randomised segment both reached this look (in a shadow stage, the copies against their originals);
- judge: the judge's decisive verdicts on the candidate's shadow pairs and its losses, against max_loss
  (ties counted apart: they show the judge was asked, not that either answer was worse).
The current stage's candidate requests (and errors, and mean latencies, for the shadow gate) are
counted too: a stage ends only once it has seen enough to catch `min_detectable_error_rate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.metrics.observations import segment_of
from gateway.rollout.increments import Histogram, VariantLook
from gateway.rollout.not_worse import NotWorse, start_tests, with_look
from gateway.rollout.plan import Plan
from gateway.rollout.sequential import (
    ExactShiftTest,
    RatioTest,
    ShiftTest,
    ThresholdTest,
    by_stratum,
    error_rate_bounds,
)
from gateway.spec.queries import PROBED

TTFT_SHARE = 0.05  # p95 <= SLO: at most 5 % of first tokens above it


@dataclass(frozen=True)
class StageCounts:
    """The current stage's counts (reset when the stage changes; never used for a rollback)."""

    stage: str
    requests: int = 0
    errors: int = 0
    candidate_latency: tuple[float, float] = (0.0, 0.0)  # TTFT seconds and count, randomised strata
    baseline_latency: tuple[float, float] = (0.0, 0.0)

    def latency_ratio(self) -> float | None:
        """Mean TTFT, candidate over baseline, this stage (the shadow gate's descriptive ratio)."""
        (ours, n_ours), (theirs, n_theirs) = self.candidate_latency, self.baseline_latency
        if not n_ours or not n_theirs or not theirs:
            return None
        return (ours / n_ours) / (theirs / n_theirs)


@dataclass(frozen=True)
class Evidence:
    plan: str  # the key of the plan these tests run under
    started: float  # when they started
    stage: StageCounts
    candidate_errors: ThresholdTest
    baseline_errors: ThresholdTest
    error_bounds: tuple[float, float] = (0.0, 1.0)  # running intersection of the error rate's CS
    error_ratio: RatioTest | None = None
    candidate_ttft: ThresholdTest | None = None
    baseline_ttft: ThresholdTest | None = None
    ttft_edge: float | None = None  # the edge the SLO test counts above
    ttft_shift: ShiftTest | None = None
    itl_shift: ShiftTest | None = None
    ttft_exact: ExactShiftTest | None = None  # ... on the answers' exact values (plan.exact_latency)
    itl_exact: ExactShiftTest | None = None
    answered: int = 0  # candidate answers the gateway measured, any segment (none: measurements missing)
    sent: int = 0  # candidate requests as Envoy counted them (with cohorts the error tests count clients)
    disagreement: ThresholdTest | None = None
    structure: RatioTest | None = None  # malformed captured answers against the baseline's
    length_cuts: tuple[int, int, int, int] = (0, 0, 0, 0)  # checked and cut: candidate's, baseline's
    judge: ThresholdTest | None = None  # the candidate's losses among the judge's decisive verdicts
    judge_ties: int = 0
    ttft_seen: int = 0  # candidate first tokens seen in randomised strata (does the server export any?)
    ttft_probed: int = 0  # of those, the probes' (servers with no TTFT histogram)
    itl_seen: int = 0
    busier_looks: int = 0  # looks with candidate requests left out of the latency comparisons (busier pods)
    load: tuple[float, float] = (0.0, 0.0)  # candidate's and baseline's requests, decayed sums
    not_worse: NotWorse | None = None  # an evidence gate's tests (gateway/rollout/not_worse.py)


def start(plan: Plan, stage: str, now: float) -> Evidence:
    """New tests, at their starting values."""
    slo = plan.max_ttft_p95 is not None
    return Evidence(
        plan=plan.key,
        started=now,
        stage=StageCounts(stage),
        candidate_errors=ThresholdTest.new(plan.max_error_rate),
        baseline_errors=ThresholdTest.new(plan.max_error_rate),
        error_ratio=RatioTest.new(plan.max_error_ratio) if plan.max_error_ratio is not None else None,
        candidate_ttft=ThresholdTest.new(TTFT_SHARE) if slo else None,
        baseline_ttft=ThresholdTest.new(TTFT_SHARE) if slo else None,
        disagreement=ThresholdTest.new(plan.max_disagreement) if plan.max_disagreement is not None else None,
        structure=RatioTest.new(plan.max_structure_ratio) if plan.max_structure_ratio is not None else None,
        judge=ThresholdTest.new(plan.max_judge_loss) if plan.max_judge_loss is not None else None,
        not_worse=start_tests(plan),
    )


def add_look(evidence: Evidence, plan: Plan, looks: Mapping[str, VariantLook], stage: str) -> Evidence:
    """`evidence` with one look's increments added (`looks`: per variant; `stage`: where the rollout
    stands now, whose counts the stage totals collect)."""
    ours, theirs = looks.get(plan.candidate, VariantLook()), looks.get(plan.baseline, VariantLook())
    (n_ours, x_ours), (n_theirs, x_theirs) = (
        ours.counted(plan.client_units),
        theirs.counted(plan.client_units),
    )
    candidate_errors = evidence.candidate_errors.update(n_ours, x_ours)
    lower, upper = evidence.error_bounds
    new_lower, new_upper = error_rate_bounds(
        candidate_errors.events, candidate_errors.requests, plan.alpha, plan.max_error_rate
    )
    evidence = replace(
        evidence,
        candidate_errors=candidate_errors,
        baseline_errors=evidence.baseline_errors.update(n_theirs, x_theirs),
        error_bounds=(max(lower, new_lower), min(upper, new_upper)),
        stage=_stage_counts(evidence.stage, stage, ours, theirs, plan),
    )
    if evidence.error_ratio is not None:
        strata = [(n_ours, x_ours, n_theirs, x_theirs)]
        evidence = replace(evidence, error_ratio=evidence.error_ratio.update(strata))
    if evidence.disagreement is not None:
        evidence = replace(evidence, disagreement=evidence.disagreement.update(ours.compared, ours.differed))
    if evidence.structure is not None:
        strata = [
            (*ours.structure[segment][:2], *theirs.structure[segment][:2])
            for segment in sorted(set(ours.structure) & set(theirs.structure) & plan.randomised_segments)
        ]
        (n_ours, cut_ours), (n_theirs, cut_theirs) = _cuts(ours), _cuts(theirs)
        before = evidence.length_cuts
        length_cuts = (before[0] + n_ours, before[1] + cut_ours, before[2] + n_theirs, before[3] + cut_theirs)
        evidence = replace(evidence, structure=evidence.structure.update(strata), length_cuts=length_cuts)
    if evidence.judge is not None:
        judge = evidence.judge.update(ours.judged, ours.lost)
        evidence = replace(evidence, judge=judge, judge_ties=evidence.judge_ties + ours.tied)
    if plan.exact_latency:
        answered = evidence.answered + sum(map(len, ours.ttft_values.values()))
        evidence = replace(evidence, answered=answered, sent=evidence.sent + ours.requests)
    evidence = _ttft_slo(evidence, plan, ours, theirs)
    evidence = replace(evidence, not_worse=with_look(evidence.not_worse, plan, ours, theirs))
    return _shifts(evidence, plan, ours, theirs)


def _cuts(look: VariantLook) -> tuple[int, int]:
    """(answers checked, cut at the token limit) over every segment: shown beside the structure test."""
    return sum(n for n, _, _ in look.structure.values()), sum(c for _, _, c in look.structure.values())


def _stage_counts(
    counts: StageCounts, stage: str, ours: VariantLook, theirs: VariantLook, plan: Plan
) -> StageCounts:
    if counts.stage != stage:
        counts = StageCounts(stage)
    requests, errors = ours.counted(plan.client_units)
    return replace(
        counts,
        requests=counts.requests + requests,
        errors=counts.errors + errors,
        candidate_latency=_add_latency(counts.candidate_latency, ours, plan),
        baseline_latency=_add_latency(counts.baseline_latency, theirs, plan),
    )


def _add_latency(total: tuple[float, float], look: VariantLook, plan: Plan) -> tuple[float, float]:
    """`total` (TTFT seconds, count) plus the look's randomised first tokens, from what the plan judges."""
    seconds, count = total
    if plan.exact_latency:
        values = [v for stratum in _randomised(look.ttft_values, plan).values() for v in stratum]
        return seconds + sum(values), count + len(values)
    strata = _routed(look.ttft, plan).values()
    return seconds + sum(h.seconds for h in strata), count + sum(h.total for h in strata)


def _routed(strata: Mapping[str, Histogram], plan: Plan) -> dict[str, Histogram]:
    """The strata of randomised traffic: the ones a comparison may use."""
    return {name: h for name, h in strata.items() if segment_of(name) in plan.randomised_segments}


def _probed(strata: Mapping[str, Histogram]) -> dict[str, Histogram]:
    """The probes' own strata: their synthetic requests, the same one to every pod."""
    return {name: h for name, h in strata.items() if segment_of(name) == PROBED}


def _observed(strata: Mapping[str, Histogram]) -> bool:
    return any(h.total for h in strata.values())


def _compared(
    ours: Mapping[str, Histogram], theirs: Mapping[str, Histogram], plan: Plan
) -> tuple[dict[str, Histogram], dict[str, Histogram], bool]:
    """What a latency comparison reads this look, and whether it is the probes': the servers'
    randomised traffic where both variants' servers observed some, else the probes' requests (servers
    that export no TTFT histogram, vLLM's aside, still get compared on what the probes measure)."""
    mine, other = _routed(ours, plan), _routed(theirs, plan)
    if _observed(mine) and _observed(other):
        return mine, other, False
    return _probed(ours), _probed(theirs), True


def _served(strata: Mapping[str, Histogram]) -> dict[str, Histogram]:
    """The servers' strata where they have any, else the probes' (the SLO test's first tokens)."""
    servers = {name: h for name, h in strata.items() if segment_of(name) != PROBED}
    return servers if _observed(servers) else _probed(strata)


def _ttft_slo(evidence: Evidence, plan: Plan, ours: VariantLook, theirs: VariantLook) -> Evidence:
    if evidence.candidate_ttft is None or evidence.baseline_ttft is None or plan.max_ttft_p95 is None:
        return evidence  # the pair is made together, in start()
    if plan.exact_latency:  # each answer's own time: the SLO itself is the edge
        slo = plan.max_ttft_p95
        return replace(
            evidence,
            ttft_edge=slo,
            candidate_ttft=evidence.candidate_ttft.update(*_slower(ours.ttft_values, slo)),
            baseline_ttft=evidence.baseline_ttft.update(*_slower(theirs.ttft_values, slo)),
        )
    mine, other = _served(ours.ttft), _served(theirs.ttft)
    edge = evidence.ttft_edge
    if edge is None:
        edges = sorted({e for h in mine.values() for e in h.edges if e >= plan.max_ttft_p95 * (1 - 1e-6)})
        if not edges:
            return evidence
        edge = edges[0]
    return replace(
        evidence,
        ttft_edge=edge,
        candidate_ttft=evidence.candidate_ttft.update(*_slow(mine, edge)),
        baseline_ttft=evidence.baseline_ttft.update(*_slow(other, edge)),
    )


def _slow(strata: Mapping[str, Histogram], edge: float) -> tuple[int, int]:
    """(first tokens, of those above `edge`) over the strata that have that edge."""
    having = [h for h in strata.values() if edge in h.edges]
    total = round(sum(h.total for h in having))
    return total, min(total, round(sum(h.above(edge) for h in having)))


def _slower(strata: Mapping[str, Sequence[float]], slo: float) -> tuple[int, int]:
    """(first tokens, of those slower than `slo`) over every stratum of measured answers."""
    values = [value for stratum in strata.values() for value in stratum]
    return len(values), sum(value > slo for value in values)


MAX_LOAD_RATIO = 1.25  # candidate requests per pod over the baseline's, above which latency is not compared
LOAD_LOOKS = 30  # the request counts' smoothing, in looks
LOAD_Z = (
    2.0  # latency is compared only where the load ratio's upper bound, this many sigmas up, is below the max
)


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


def _shifts(evidence: Evidence, plan: Plan, ours: VariantLook, theirs: VariantLook) -> Evidence:
    max_ratio = plan.max_latency_ratio
    if max_ratio is None:
        return evidence
    evidence = replace(evidence, load=smoothed_load(evidence.load, ours, theirs))
    if load_ratio_bound(evidence.load, ours, theirs) > MAX_LOAD_RATIO:
        return replace(evidence, busier_looks=evidence.busier_looks + (ours.requests > 0))
    if plan.exact_latency:
        return _exact_shifts(evidence, plan, max_ratio, ours, theirs)
    mine, other, probed = _compared(ours.ttft, theirs.ttft, plan)
    ttft_seen = round(sum(h.total for h in mine.values()))
    mine_itl, other_itl = _routed(ours.itl, plan), _routed(theirs.itl, plan)
    return replace(
        evidence,
        ttft_shift=_shift(evidence.ttft_shift, max_ratio, mine, other),
        itl_shift=_shift(evidence.itl_shift, max_ratio, mine_itl, other_itl),
        ttft_seen=evidence.ttft_seen + ttft_seen,
        ttft_probed=evidence.ttft_probed + ttft_seen * probed,
        itl_seen=evidence.itl_seen + round(sum(h.total for h in mine_itl.values())),
    )


def _exact_shifts(
    evidence: Evidence, plan: Plan, max_ratio: float, ours: VariantLook, theirs: VariantLook
) -> Evidence:
    """The latency comparisons on the answers the gateway measured: each request's exact time, routed
    traffic only (the probes' requests do not pass Envoy), per stratum both variants reached this look."""
    ttft = by_stratum(_randomised(ours.ttft_values, plan), _randomised(theirs.ttft_values, plan))
    itl = by_stratum(_randomised(ours.itl_values, plan), _randomised(theirs.itl_values, plan))
    ttft_test = evidence.ttft_exact or ExactShiftTest.new(max_ratio - 1)
    itl_test = evidence.itl_exact or ExactShiftTest.new(max_ratio - 1)
    return replace(
        evidence,
        ttft_exact=ttft_test.update(ttft),
        itl_exact=itl_test.update(itl),
        ttft_seen=evidence.ttft_seen + sum(len(mine) for mine, _ in ttft),
        itl_seen=evidence.itl_seen + sum(len(mine) for mine, _ in itl),
    )


def _randomised(values: Mapping[str, Sequence[float]], plan: Plan) -> dict[str, Sequence[float]]:
    return {name: v for name, v in values.items() if segment_of(name) in plan.randomised_segments}


def _shift(
    test: ShiftTest | None,
    max_ratio: float,
    ours: Mapping[str, Histogram],
    theirs: Mapping[str, Histogram],
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


def fired(log_value: float, bound: float) -> bool:
    return math.isfinite(log_value) and log_value >= bound
