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
Every one of the PARTS variant intervals runs at alpha / PARTS, so all the differences hold together
with probability at least 1 - alpha (the union bound, valid under any dependence between them). Each
rests on its variant's observations being independent draws with one distribution over the
experiment: random assignment, and no drift common to both that moves one variant's share (a load
swing that slows both alike moves both intervals, not their ratio's truth).

Randomisation: latency reads the randomised strata only; the error counts are Envoy's per cluster,
which do not tell a header segment apart, so with header rules the error rate is not compared (as for
error_ratio). The counts keep adding after the experiment concludes (its split stays): the intervals
stay valid, and only narrow. The row fails nothing: its one check passes once every difference is
decided, which the machine reads as a decision (`end_on_decision`); the guard's own checks roll back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from gateway.metrics.observations import ERRORS, ITL, REQUESTS, TTFT, UNIT_ERRORS, UNITS
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import randomised
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import error_rate_bounds
from gateway.rollout.sequential.quantiles import EDGES, add_values, cumulative, quantile_bounds, ratio_bounds
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

EXPERIMENT = "experiment"
QUANTILES = (0.5, 0.9)
PARTS = 2 + 2 * 2 * len(QUANTILES)  # variant intervals: error rate x 2, (TTFT, TPOT) x quantiles x 2

Bins = dict[int, int]  # grid bin -> answers (sequential/quantiles.py)


@dataclass(frozen=True)
class ExperimentSettings:
    alpha: float
    prior_error_rate: float  # where the error intervals' prior is tightest (analysis.max_error_rate)
    errors_randomised: bool  # no header rule: Envoy's error counts are the randomised traffic's


@dataclass(frozen=True)
class ExperimentTests:
    """Both variants' counts since the experiment started: requests and errors, and latencies per bin."""

    requests: tuple[int, int] = (0, 0)  # candidate, baseline
    errors: tuple[int, int] = (0, 0)
    ttft: tuple[Bins, Bins] = field(default_factory=lambda: ({}, {}))
    tpot: tuple[Bins, Bins] = field(default_factory=lambda: ({}, {}))
    kind: Literal["experiment"] = "experiment"


@dataclass(frozen=True)
class Difference:
    """One difference: its estimate, its interval (valid at every look at once) and whether it is
    decided (the interval excludes `null`: 0 for a difference, 1 for a ratio)."""

    name: str
    kind: Literal["difference", "ratio"]
    estimate: float | None
    lower: float
    upper: float
    samples: tuple[int, int]  # candidate's and baseline's observations
    decided: bool


@dataclass(frozen=True)
class Report:
    alpha: float
    differences: tuple[Difference, ...]
    not_compared: tuple[str, ...]  # parts left out, with why

    @property
    def decided(self) -> bool:
        return bool(self.differences) and not self.not_compared and all(d.decided for d in self.differences)


def _latencies(strata: Mapping[str, Sequence[float]], plan: Plan) -> list[float]:
    return [value for values in randomised(strata, plan).values() for value in values]


class ExperimentRow:
    name = EXPERIMENT
    checks = (EXPERIMENT,)
    signals = (REQUESTS, ERRORS, UNITS, UNIT_ERRORS, TTFT, ITL)
    budgeted = False  # it rolls nothing back: its alpha is the report's own
    detectors = 0

    def settings(self, spec: RolloutSpec) -> ExperimentSettings | Off:
        experiment = spec.strategy.experiment if spec.strategy is not None else None
        if experiment is None:
            return Off("the strategy is not an experiment")
        return ExperimentSettings(experiment.alpha, spec.analysis.max_error_rate, not spec.routing.rules)

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
        )

    def verdicts(
        self, tests: ExperimentTests, settings: ExperimentSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        """Passes once every difference is decided; inconclusive until then (it never fails)."""
        found = report(tests, settings)
        verdict = Verdict.PASS if found.decided else Verdict.INCONCLUSIVE
        words = "; ".join(describe(d) for d in found.differences)
        left = f"; not compared: {', '.join(found.not_compared)}" if found.not_compared else ""
        reason = (
            f"{'every difference decided' if found.decided else 'deciding'}: {words or 'no data yet'}{left}"
        )
        return [Check(EXPERIMENT, verdict, None, tests.requests[0], None, found.alpha, reason)]


def report(tests: ExperimentTests, settings: ExperimentSettings) -> Report:
    """Every difference so far, each interval at alpha / PARTS (all hold together at 1 - alpha)."""
    alpha = settings.alpha / PARTS
    differences, left = [], []
    if settings.errors_randomised:
        differences.append(_error_difference(tests, alpha, settings.prior_error_rate))
    else:
        left.append("error_rate (header rules: Envoy's error counts mix the segments)")
    for signal, bins in (("ttft", tests.ttft), ("tpot", tests.tpot)):
        if not bins[0] or not bins[1]:
            left.append(f"{signal} (no answers measured on both variants yet)")
            continue
        differences += [_quantile_ratio(signal, bins, q, alpha) for q in QUANTILES]
    return Report(settings.alpha, tuple(differences), tuple(left))


def _error_difference(tests: ExperimentTests, alpha: float, prior: float) -> Difference:
    (n_ours, n_theirs), (x_ours, x_theirs) = tests.requests, tests.errors
    lo_ours, hi_ours = error_rate_bounds(x_ours, n_ours, alpha, prior)
    lo_theirs, hi_theirs = error_rate_bounds(x_theirs, n_theirs, alpha, prior)
    lower, upper = lo_ours - hi_theirs, hi_ours - lo_theirs
    estimate = x_ours / n_ours - x_theirs / n_theirs if n_ours and n_theirs else None
    return Difference(
        "error_rate", "difference", estimate, lower, upper, tests.requests, lower > 0 or upper < 0
    )


def _quantile_ratio(signal: str, bins: tuple[Bins, Bins], q: float, alpha: float) -> Difference:
    ours, theirs = quantile_bounds(bins[0], q, alpha), quantile_bounds(bins[1], q, alpha)
    lower, upper = (float(end) for end in ratio_bounds(ours, theirs))
    mine, other = _point(bins[0], q), _point(bins[1], q)
    samples = (cumulative(bins[0])[1], cumulative(bins[1])[1])
    name = f"{signal}_p{round(q * 100)}"
    return Difference(name, "ratio", mine / other, lower, upper, samples, lower > 1 or upper < 1)


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
    else:
        estimate = "n/a" if d.estimate is None else f"{d.estimate:+.3%}"
        text = f"{d.name} {estimate} [{d.lower:+.3%}, {d.upper:+.3%}]"
    return f"{text} decided" if d.decided else text


def _finite(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else "inf"
