"""experiment: what `strategy: experiment` reports of the candidate against the baseline. Pure.

The differences (issue 38 item 3): the error rate (candidate minus baseline), and TTFT and time per
output token (each answer's mean inter-token gap) at the median and p90 (candidate over baseline), each
with a confidence sequence: an interval that covers the true difference at every look at once, however
often it is read, so "decided" (the interval excludes 0, or 1 for a ratio) can be read at any look.

Constructions (the issue leaves them open):
- each variant's error rate: Robbins' beta-binomial mixture, inverted (sequential/budget.py
  `error_rate_bounds`, the rollout's own error bounds); the difference's interval is the two
  intervals' difference (lower: ours' lower minus theirs' upper);
- each variant's latency quantile: the sign-test sequence on a fixed grid (sequential/quantiles.py);
  the ratio's interval is the two intervals' ratio.

Where quality is on (its check's spec field: analysis.quality.structure, max_greedy_disagreement or
min_shadow_agreement, quality.judge), the report holds beside them:
- structure_failures: the captured answers' malformed shares (randomised segments), candidate minus
  baseline, built as the error rate's (the prior centred on STRUCTURE_PRIOR);
- greedy_agreement: the share of the candidate's greedy pairs whose answer equals the baseline's (one
  proportion, the same mixture centred on the check's 1 - max disagreement), decided once shown below 1;
- judge_win_rate: the candidate's share of the judge's decisive verdicts (wins / (wins + losses), the
  mixture uniform), decided once it leaves out 1/2. Ties are left out and shown: a tie says the judge
  could not tell the answers apart, not who is better, and counting it as half a win would pull the
  share to 1/2 by how often the judge cannot tell, a different question.
A check that is off leaves its interval out, with why, as does one with nothing to read yet.

Every interval runs at alpha / parts: PARTS (10) variant intervals for the serving differences, plus 2
for structure and 1 each for agreement and the judge where on (up to 14), so all hold together with
probability at least 1 - alpha (the union bound, valid under any dependence between them). Turning a
quality check on or off changes the plan's identity (its rows' identities and budgeted tests), so the
experiment's counts start anew at the new level: alpha is never re-split over counts already seen. Each
rests on its variant's observations being independent draws with one distribution over the
experiment: random assignment, and no drift common to both that moves one variant's share (a load
swing that slows both alike moves both intervals, not their ratio's truth).

Randomisation: latency reads the randomised strata only; the error counts are Envoy's per cluster,
which do not tell a header segment apart, so with header rules the error rate is not compared (as for
error_ratio). The counts keep adding after the experiment concludes (its split stays): the intervals
stay valid, and only narrow. The row fails nothing: its one check passes once every serving difference
is decided, which the machine reads as a decision (`end_on_decision`); the guard's own checks roll back.
The quality intervals do not hold that decision: their samples are a sampled few (captured answers, greedy
pairs, a judge spent per hour), agreement has no "no difference" to leave out for a candidate that does
not change answers, and pairs come only from the share `mirror_percent` copies, so waiting on them
would run nearly every experiment to its duration. Ending on the serving ones costs them nothing in validity: a confidence
sequence covers at any stopping time, whatever decides it, so they are read, at their level, as they
stand when it ends (and the counts keep adding after).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from gateway.metrics.observations import (
    COMPARED,
    DIFFERED,
    ERRORS,
    ITL,
    JUDGED,
    LOST,
    MALFORMED,
    REQUESTS,
    STRUCTURED,
    TIED,
    TTFT,
    UNIT_ERRORS,
    UNITS,
)
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import greedy_disagreement, judge_of, randomised, structure_quality
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import error_rate_bounds
from gateway.rollout.sequential.quantiles import EDGES, add_values, cumulative, quantile_bounds, ratio_bounds
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

EXPERIMENT = "experiment"
QUANTILES = (0.5, 0.9)
PARTS = 2 + 2 * 2 * len(QUANTILES)  # serving intervals: error rate x 2, (TTFT, TPOT) x quantiles x 2
# Where each variant's structure-failure interval is tightest (a mixture prior's centre: it sets the width
# near the truth, never the coverage): a few percent of answers malformed is what the check is there for.
STRUCTURE_PRIOR = 0.02

STRUCTURE_FAILURES, GREEDY_AGREEMENT, JUDGE_WIN_RATE = (
    "structure_failures",
    "greedy_agreement",
    "judge_win_rate",
)
# A share's "no difference": greedy answers all equal to the baseline's; the judge preferring neither
QUALITY_NULLS = {GREEDY_AGREEMENT: 1.0, JUDGE_WIN_RATE: 0.5}
NO_PAIRS = ": a pair is a shadow copy beside its original (strategy.experiment.mirror_percent)"

Bins = dict[int, int]  # grid bin -> answers (sequential/quantiles.py)


@dataclass(frozen=True)
class QualityOn:
    """The quality intervals the report holds (their checks are on), and why each other one is left out."""

    structure: bool = False
    greedy_prior: float | None = None  # where on: 1 - the check's largest disagreement (the prior's centre)
    judge: bool = False
    off: tuple[str, ...] = ()

    @property
    def parts(self) -> int:
        return 2 * self.structure + (self.greedy_prior is not None) + self.judge


@dataclass(frozen=True)
class ExperimentSettings:
    alpha: float
    prior_error_rate: float  # where the error intervals' prior is tightest (analysis.max_error_rate)
    errors_randomised: bool  # no header rule: Envoy's error counts are the randomised traffic's
    quality: QualityOn = field(default_factory=QualityOn)

    @property
    def parts(self) -> int:
        """The intervals the union bound splits alpha over: every serving one, and each quality one on."""
        return PARTS + self.quality.parts


@dataclass(frozen=True)
class ExperimentTests:
    """Both variants' counts since the experiment started: requests and errors, and latencies per bin."""

    requests: tuple[int, int] = (0, 0)  # candidate, baseline
    errors: tuple[int, int] = (0, 0)
    ttft: tuple[Bins, Bins] = field(default_factory=lambda: ({}, {}))
    tpot: tuple[Bins, Bins] = field(default_factory=lambda: ({}, {}))
    checked: tuple[int, int] = (0, 0)  # captured answers whose structure was checked, randomised segments
    malformed: tuple[int, int] = (0, 0)
    greedy: tuple[int, int] = (0, 0)  # the candidate's greedy pairs compared, and those that differed
    judged: tuple[int, int, int] = (0, 0, 0)  # the judge's decisive verdicts, the candidate's wins, ties
    kind: Literal["experiment"] = "experiment"


@dataclass(frozen=True)
class Difference:
    """One difference: its estimate, its interval (valid at every look at once) and whether it is
    decided (the interval excludes `null`: 0 for a difference, 1 for a ratio; a share's own, see
    QUALITY_NULLS)."""

    name: str
    kind: Literal["difference", "ratio", "share"]
    estimate: float | None
    lower: float
    upper: float
    samples: tuple[int, int]  # candidate's and baseline's observations (a share of pairs: the pairs, twice)
    decided: bool
    null: float = 0.0
    ties: int | None = None  # the judge's ties, left out of its win share (judge_win_rate only)


@dataclass(frozen=True)
class Report:
    alpha: float
    differences: tuple[Difference, ...]
    not_compared: tuple[str, ...]  # parts left out, with why
    quality: tuple[Difference, ...] = ()  # reported beside the differences: the decision does not wait
    quality_not_compared: tuple[str, ...] = ()  # on them (module docstring)

    @property
    def decided(self) -> bool:
        return bool(self.differences) and not self.not_compared and all(d.decided for d in self.differences)


def _forms(look: VariantLook, plan: Plan) -> tuple[int, int]:
    """(answers checked, malformed ones) on the randomised segments: the structure failures' counts."""
    strata = randomised(look.structure, plan).values()
    return sum(n for n, _, _ in strata), sum(bad for _, bad, _ in strata)


def _latencies(strata: Mapping[str, Sequence[float]], plan: Plan) -> list[float]:
    return [value for values in randomised(strata, plan).values() for value in values]


class ExperimentRow:
    name = EXPERIMENT
    checks = (EXPERIMENT,)
    signals = (REQUESTS, ERRORS, UNITS, UNIT_ERRORS, TTFT, ITL, STRUCTURED, MALFORMED, COMPARED, DIFFERED,
               JUDGED, LOST, TIED)  # fmt: skip
    budgeted = False  # it rolls nothing back: its alpha is the report's own
    detectors = 0

    def settings(self, spec: RolloutSpec) -> ExperimentSettings | Off:
        experiment = spec.strategy.experiment if spec.strategy is not None else None
        if experiment is None:
            return Off("the strategy is not an experiment")
        return ExperimentSettings(
            experiment.alpha, spec.analysis.max_error_rate, not spec.routing.rules, _quality_on(spec)
        )

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        experiment = spec.strategy.experiment if spec.strategy is not None else None
        # alpha and the error intervals' prior define the intervals: a new split or duration keeps the
        # counts (each variant's interval holds under any allocation); either chosen after seeing them
        # would not be valid
        if experiment is None:
            return {}
        return {EXPERIMENT: {"alpha": experiment.alpha, "prior_error_rate": spec.analysis.max_error_rate}}

    def start(self, settings: ExperimentSettings) -> ExperimentTests:
        return ExperimentTests()

    def add(
        self,
        tests: ExperimentTests,
        settings: ExperimentSettings,
        plan: Plan,
        ours: VariantLook,
        theirs: VariantLook,
    ) -> ExperimentTests:
        (mine, mine_failed), (other, other_failed) = (
            ours.counted(plan.client_units),
            theirs.counted(plan.client_units),
        )
        (mine_checked, mine_malformed), (other_checked, other_malformed) = (
            _forms(ours, plan),
            _forms(theirs, plan),
        )
        decisive, ties = tests.judged[0] + ours.judged, tests.judged[2] + ours.tied
        return replace(
            tests,
            requests=(tests.requests[0] + mine, tests.requests[1] + other),
            errors=(tests.errors[0] + mine_failed, tests.errors[1] + other_failed),
            ttft=(
                add_values(tests.ttft[0], _latencies(ours.ttft_values, plan)),
                add_values(tests.ttft[1], _latencies(theirs.ttft_values, plan)),
            ),
            tpot=(
                add_values(tests.tpot[0], _latencies(ours.itl_values, plan)),
                add_values(tests.tpot[1], _latencies(theirs.itl_values, plan)),
            ),
            checked=(tests.checked[0] + mine_checked, tests.checked[1] + other_checked),
            malformed=(tests.malformed[0] + mine_malformed, tests.malformed[1] + other_malformed),
            greedy=(tests.greedy[0] + ours.compared, tests.greedy[1] + ours.differed),
            judged=(decisive, tests.judged[1] + ours.judged - ours.lost, ties),
        )

    def verdicts(
        self, tests: ExperimentTests, settings: ExperimentSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        """Passes once every serving difference is decided; inconclusive until then (it never fails)."""
        found = report(tests, settings)
        verdict = Verdict.PASS if found.decided else Verdict.INCONCLUSIVE
        words = "; ".join(describe(d) for d in found.differences)
        left = f"; not compared: {', '.join(found.not_compared)}" if found.not_compared else ""
        if found.quality:
            left += f"; quality (not waited for): {'; '.join(describe(d) for d in found.quality)}"
        reason = (
            f"{'every difference decided' if found.decided else 'deciding'}: {words or 'no data yet'}{left}"
        )
        return [Check(EXPERIMENT, verdict, None, tests.requests[0], None, found.alpha, reason)]


def report(tests: ExperimentTests, settings: ExperimentSettings) -> Report:
    """Every difference so far, each interval at alpha / parts (all hold together at 1 - alpha)."""
    alpha = settings.alpha / settings.parts
    differences, left = [], []
    if settings.errors_randomised:
        errors = _rate_difference(
            "error_rate", tests.requests, tests.errors, alpha, settings.prior_error_rate
        )
        differences.append(errors)
    else:
        left.append("error_rate (header rules: Envoy's error counts mix the segments)")
    for signal, bins in (("ttft", tests.ttft), ("tpot", tests.tpot)):
        if not bins[0] or not bins[1]:
            left.append(f"{signal} (no answers measured on both variants yet)")
            continue
        differences += [_quantile_ratio(signal, bins, q, alpha) for q in QUANTILES]
    quality, quality_left = _quality(tests, settings.quality, alpha)
    return Report(settings.alpha, tuple(differences), tuple(left), quality, quality_left)


def _quality_on(spec: RolloutSpec) -> QualityOn:
    structure, most, judge = structure_quality(spec), greedy_disagreement(spec), judge_of(spec)
    off = [
        f"{name} (off: {found.why})"
        for name, found in (
            (STRUCTURE_FAILURES, structure),
            (GREEDY_AGREEMENT, most),
            (JUDGE_WIN_RATE, judge),
        )
        if isinstance(found, Off)
    ]
    return QualityOn(
        structure=not isinstance(structure, Off),
        greedy_prior=None if isinstance(most, Off) else 1 - most,
        judge=not isinstance(judge, Off),
        off=tuple(off),
    )


def _quality(
    tests: ExperimentTests, on: QualityOn, alpha: float
) -> tuple[tuple[Difference, ...], tuple[str, ...]]:
    """The quality intervals on, each at `alpha`; those left out with why (off, or nothing to read yet)."""
    found, left = [], list(on.off)
    if on.structure and all(tests.checked):
        found.append(
            _rate_difference(STRUCTURE_FAILURES, tests.checked, tests.malformed, alpha, STRUCTURE_PRIOR)
        )
    elif on.structure:
        left.append(f"{STRUCTURE_FAILURES} (no captured answer of both variants checked yet: live answers are "
                    "captured at analysis.quality.capture_percent)")  # fmt: skip
    compared, differed = tests.greedy
    if on.greedy_prior is not None and compared:
        found.append(_share(GREEDY_AGREEMENT, compared - differed, compared, alpha, on.greedy_prior))
    elif on.greedy_prior is not None:
        left.append(f"{GREEDY_AGREEMENT} (no greedy pair compared yet{NO_PAIRS})")
    decisive, wins, ties = tests.judged
    if on.judge and decisive:
        found.append(replace(_share(JUDGE_WIN_RATE, wins, decisive, alpha, 0.5), ties=ties))
    elif on.judge:
        left.append(f"{JUDGE_WIN_RATE} (no decisive verdict yet, {ties} ties{NO_PAIRS})")
    return tuple(found), tuple(left)


def _rate_difference(
    name: str, observed: tuple[int, int], events: tuple[int, int], alpha: float, prior: float
) -> Difference:
    """The candidate's rate minus the baseline's: each variant's mixture interval, their difference."""
    (n_ours, n_theirs), (x_ours, x_theirs) = observed, events
    lo_ours, hi_ours = error_rate_bounds(x_ours, n_ours, alpha, prior)
    lo_theirs, hi_theirs = error_rate_bounds(x_theirs, n_theirs, alpha, prior)
    lower, upper = lo_ours - hi_theirs, hi_ours - lo_theirs
    estimate = x_ours / n_ours - x_theirs / n_theirs if n_ours and n_theirs else None
    return Difference(name, "difference", estimate, lower, upper, observed, lower > 0 or upper < 0)


def _share(name: str, events: int, pairs: int, alpha: float, prior: float) -> Difference:
    """The candidate's share of `pairs` (one proportion): the same mixture interval, decided once it
    leaves out the share's null (QUALITY_NULLS)."""
    lower, upper = error_rate_bounds(events, pairs, alpha, prior)
    null = QUALITY_NULLS[name]
    return Difference(
        name, "share", events / pairs, lower, upper, (pairs, pairs), lower > null or upper < null, null
    )


def _quantile_ratio(signal: str, bins: tuple[Bins, Bins], q: float, alpha: float) -> Difference:
    ours, theirs = quantile_bounds(bins[0], q, alpha), quantile_bounds(bins[1], q, alpha)
    lower, upper = (float(end) for end in ratio_bounds(ours, theirs))
    mine, other = _point(bins[0], q), _point(bins[1], q)
    samples = (cumulative(bins[0])[1], cumulative(bins[1])[1])
    name = f"{signal}_p{round(q * 100)}"
    return Difference(name, "ratio", mine / other, lower, upper, samples, lower > 1 or upper < 1, 1.0)


def _point(bins: Bins, q: float) -> float:
    """The empirical q-quantile, to the grid: the first edge with at least q of the answers at or below."""
    cum, n = cumulative(bins)
    index = int(np.searchsorted(cum, q * n, side="left"))
    return float(EDGES[min(index, len(EDGES) - 1)])


def describe(difference: Difference) -> str:
    """`ttft_p50 1.12x [1.05, 1.20]` or `error_rate +0.10% [-0.20%, +0.40%]`, with `decided` where it is."""
    d = difference
    if d.kind == "ratio":
        text = f"{d.name} {d.estimate:.3g}x [{d.lower:.3g}, {_finite(d.upper, '.3g')}]"
    elif d.kind == "share":
        text = f"{d.name} {d.estimate:.2%} [{d.lower:.2%}, {d.upper:.2%}]"
    else:
        estimate = "n/a" if d.estimate is None else f"{d.estimate:+.3%}"
        text = f"{d.name} {estimate} [{d.lower:+.3%}, {d.upper:+.3%}]"
    return f"{text} decided" if d.decided else text


def _finite(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else "inf"
