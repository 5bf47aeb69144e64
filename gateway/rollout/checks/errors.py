"""error_rate and error_rate_change: the candidate's failed attempts against max_error_rate. Pure.

One test on the candidate's attempts and failed attempts (Envoy's cluster counters: a failure hidden by
the fallback retry still counts; and the answers the gateway measured failing after their `200`,
gateway/metrics/answered.py; with cohorts each client once): its e-value is error_rate, its change
detector error_rate_change. In a stage that ends on evidence, error_rate passes only once the stage has
seen enough requests to catch `min_detectable_error_rate` (the plan's stage_requests): until then it
extends the stage. Promoted or manual, no stage ends, and only the test itself decides.

Whose errors they are is told by comparison, not by which test fires first (`blame`): `blame` is the
errors' split between the variants against their request shares, look by look (RatioTest at psi0 = 1:
H0 "the candidate's error rate is at most the baseline's"), an e-process whatever the shared rate does,
with its change detector beside it for a regression that begins late.
A failing test is the candidate's once that comparison shows its rate above the baseline's, or when the
baseline had no traffic to compare with (100 %: the threshold alone guards); a shared incident once the
same threshold test on the baseline's own counts fired too and the comparison did not; until one of
the two, it holds as inconclusive. A race decided the shared label before: the baseline's test won it
by carrying more traffic, so at an even split the candidate was blamed for half the shared incidents
(BENCHMARKS.md, "Shared incidents"). It still does where the spec has header rules: they route segments
apart, Envoy's counters mix them, and a comparison of mixes is no comparison (error_ratio is off there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

import numpy as np

from gateway.metrics.observations import ERRORS, REQUESTS, UNIT_ERRORS, UNITS
from gateway.rollout.checks.base import Moment, Plan
from gateway.rollout.checks.common import baseline_fired, fired, shared_reason
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import RatioTest, ThresholdTest, error_rate_bounds
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

ERROR_RATE = "error_rate"
ERROR_RATE_CHANGE = "error_rate_change"


class Blame(IntEnum):
    """Whose a failing error test is."""

    UNTOLD = 0  # not yet told apart: hold
    CANDIDATE = 1  # its rate is shown above the baseline's, or there was no baseline to compare with
    SHARED = 2  # the baseline's own test fired too, and the comparison did not


def blame(worse: Any, alone: Any, baseline_failing: Any) -> Any:
    """`Blame` values, elementwise over runs (the bench's arrays) or for one: `worse`, the comparison
    fired; `alone`, the candidate's last look with traffic had none on the baseline; `baseline_failing`,
    the baseline's threshold test (e-value or detector) fired."""
    own = np.logical_or(worse, alone)
    return np.where(own, Blame.CANDIDATE, np.where(baseline_failing, Blame.SHARED, Blame.UNTOLD))


@dataclass(frozen=True)
class ErrorSettings:
    max_error_rate: float
    compared: bool = True  # whose a failure is, by comparison: the spec has no header rule


@dataclass(frozen=True)
class ErrorTests:
    candidate: ThresholdTest
    baseline: ThresholdTest
    bounds: tuple[float, float] = (0.0, 1.0)  # running intersection of the error rate's anytime CS
    blame: RatioTest | None = None  # the candidate's errors against the baseline's (None: saved before it)
    alone: bool = False  # the candidate's last look with traffic had none on the baseline
    kind: Literal["error_rate"] = "error_rate"


class ErrorRate:
    name = ERROR_RATE
    checks = (ERROR_RATE, ERROR_RATE_CHANGE)
    signals = (REQUESTS, ERRORS, UNITS, UNIT_ERRORS)
    budgeted = True
    detectors = 1

    def settings(self, spec: RolloutSpec) -> ErrorSettings:
        return ErrorSettings(spec.analysis.max_error_rate, compared=not spec.routing.rules)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        return {"max_error_rate": spec.analysis.max_error_rate}

    def start(self, settings: ErrorSettings) -> ErrorTests:
        fresh = ThresholdTest.new(settings.max_error_rate)
        return ErrorTests(fresh, fresh, blame=RatioTest.new(1.0))

    def add(
        self, tests: ErrorTests, settings: ErrorSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> ErrorTests:
        counts, others = ours.counted(plan.client_units), theirs.counted(plan.client_units)
        candidate = tests.candidate.update(*counts)
        lower, upper = tests.bounds
        new_lower, new_upper = error_rate_bounds(
            candidate.events, candidate.requests, plan.alpha, settings.max_error_rate
        )
        # a state saved before the comparison starts it now: an e-process started at any look is one
        compared = tests.blame or RatioTest.new(1.0)
        return ErrorTests(
            candidate,
            tests.baseline.update(*others),
            (max(lower, new_lower), min(upper, new_upper)),
            compared.update([(*counts, *others)]),
            others[0] == 0 if counts[0] else tests.alone,
        )

    def verdicts(
        self, tests: ErrorTests, settings: ErrorSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        return [_rate(tests, settings, plan, moment), _change(tests, settings, plan)]


def units(plan: Plan) -> str:
    """What the error tests count: requests, or with cohorts each client once (metrics/client_units.py)."""
    return "observations (a client counted once)" if plan.client_units else "requests"


def confidence(lower: float, upper: float) -> str:
    """The running intersection of the error rate's confidence sequences, in words. It assumes one rate
    for the whole rollout: where the rate moved (healthy for hours, then failing), the sets of before and
    after share no rate, and the intersection is empty, which says just that."""
    if lower > upper:
        return (
            f"CS empty: no one error rate fits the whole rollout (some looks put it below {upper:.3%}, "
            f"later ones above {lower:.3%})"
        )
    return f"CS [{lower:.3%}, {upper:.3%}]"


def worse(compared: RatioTest, plan: Plan) -> bool:
    """The comparison shows the candidate's errors above the baseline's: its e-value, or its change
    detector (a regression that began after hours of healthy traffic)."""
    return fired(compared.log_evalue, plan.log_bound) or fired(compared.log_detector, plan.log_detector_bound)


def whose(tests: ErrorTests, plan: Plan, compared: bool = True) -> Blame:
    """Whose a failing error test is, by the module docstring's rule; not `compared`: the baseline's own
    test alone tells a shared incident (the race)."""
    failing = baseline_fired(plan, tests.baseline)
    if not compared:
        return Blame.SHARED if failing else Blame.CANDIDATE
    shown = tests.blame is not None and worse(tests.blame, plan)
    return Blame(int(blame(shown, tests.alone, failing)))


def _told(tests: ErrorTests, settings: ErrorSettings, plan: Plan, reason: str) -> tuple[Verdict, str, bool]:
    """A failing test's verdict, reason and shared flag, by whose it is."""
    compared = tests.blame or RatioTest.new(1.0)
    evidence = (
        f"the comparison at equal exposure: log e-value {compared.log_evalue:.2f} vs {plan.log_bound:.2f}, "
        f"change detector {compared.log_detector:.2f} vs {plan.log_detector_bound:.2f}, "
        f"{compared.candidate_events}/{compared.candidate_requests} against "
        f"{compared.baseline_events}/{compared.baseline_requests} (looks both variants had traffic)"
    )
    if not settings.compared:
        evidence = "header rules route segments apart and Envoy's counters mix them: not compared"
    found = whose(tests, plan, settings.compared)
    if found == Blame.CANDIDATE and settings.compared and worse(compared, plan):
        return Verdict.FAIL, f"{reason}; above the baseline's, {evidence}", False
    if found == Blame.CANDIDATE and not settings.compared:
        return Verdict.FAIL, f"{reason}; the baseline's own test has not fired ({evidence})", False
    if found == Blame.CANDIDATE:
        return Verdict.FAIL, f"{reason}; the baseline had no traffic to compare with", False
    if found == Blame.SHARED:
        return (
            Verdict.FAIL,
            shared_reason(f"{reason}; not shown above the baseline's, {evidence}", True),
            True,
        )
    return (
        Verdict.INCONCLUSIVE,
        f"holding until told whose: {reason}; the baseline's own test has not fired and the candidate's "
        f"errors are not shown above the baseline's, {evidence}",
        False,
    )


def _rate(tests: ErrorTests, settings: ErrorSettings, plan: Plan, moment: Moment) -> Check:
    test, most = tests.candidate, settings.max_error_rate
    lower, upper = tests.bounds
    counts = f"{test.events} errors in {test.requests} candidate {units(plan)} this rollout"
    shared = False
    if fired(test.log_evalue, plan.log_bound):
        verdict, reason, shared = _told(tests, settings, plan, (
            f"error rate above {most:.2%}: log e-value {test.log_evalue:.2f} >= "
            f"{plan.log_bound:.2f} (alpha {plan.alpha:.2%}), {counts}, "
            f"anytime {1 - plan.alpha:.1%} {confidence(lower, upper)}"
        ))  # fmt: skip
        bound = lower
    elif moment.advancing and moment.stage_observations < plan.stage_requests:
        reason = (
            f"extending: {moment.stage_observations} of the {plan.stage_requests} candidate {units(plan)} "
            f"this stage needs to catch its smallest regression; {counts}"
        )
        verdict, bound = Verdict.INCONCLUSIVE, upper
    else:
        reason = f"no evidence above {most:.2%}; {counts}, {confidence(lower, upper)}"
        verdict, bound = Verdict.PASS, upper
    rate = test.events / test.requests if test.requests else None
    return Check(ERROR_RATE, verdict, rate, test.requests, bound, most, reason, test.log_evalue,
                 plan.log_bound, shared)  # fmt: skip


def _change(tests: ErrorTests, settings: ErrorSettings, plan: Plan) -> Check:
    test, most = tests.candidate, settings.max_error_rate
    verdict, shared = Verdict.PASS, False
    reason = f"no change above {most:.2%} ({test.steps} looks with traffic)"
    if fired(test.log_detector, plan.log_detector_bound):
        verdict, reason, shared = _told(tests, settings, plan, (
            f"the error rate rose above {most:.2%}: change detector log statistic "
            f"{test.log_detector:.2f} >= {plan.log_detector_bound:.2f}"
        ))  # fmt: skip
    return Check(ERROR_RATE_CHANGE, verdict, None, test.requests, None, most, reason, test.log_detector,
                 plan.log_detector_bound, shared)  # fmt: skip
