"""error_rate and error_rate_change: the candidate's failed attempts against max_error_rate. Pure.

One test on the candidate's attempts and failed attempts (Envoy's cluster counters: a failure hidden by
the fallback retry still counts; and the answers the gateway measured failing after their `200`,
gateway/metrics/answered.py; with cohorts each client once): its e-value is error_rate, its change
detector error_rate_change. The same test on the baseline's own counts tells a shared incident from
the candidate's. In a stage that ends on evidence, error_rate passes only once the stage has seen enough
requests to catch `min_detectable_error_rate` (the plan's stage_requests): until then it extends the
stage. Promoted or manual, no stage ends, and only the test itself decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.metrics.observations import ERRORS, REQUESTS, UNIT_ERRORS, UNITS
from gateway.rollout.checks.base import Moment, Plan
from gateway.rollout.checks.common import baseline_fired, fired, shared_reason
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import ThresholdTest, error_rate_bounds
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

ERROR_RATE = "error_rate"
ERROR_RATE_CHANGE = "error_rate_change"


@dataclass(frozen=True)
class ErrorSettings:
    max_error_rate: float


@dataclass(frozen=True)
class ErrorTests:
    candidate: ThresholdTest
    baseline: ThresholdTest
    bounds: tuple[float, float] = (0.0, 1.0)  # running intersection of the error rate's anytime CS
    kind: Literal["error_rate"] = "error_rate"


class ErrorRate:
    name = ERROR_RATE
    checks = (ERROR_RATE, ERROR_RATE_CHANGE)
    signals = (REQUESTS, ERRORS, UNITS, UNIT_ERRORS)
    budgeted = True
    detectors = 1

    def settings(self, spec: RolloutSpec) -> ErrorSettings:
        return ErrorSettings(spec.analysis.max_error_rate)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        return {"max_error_rate": spec.analysis.max_error_rate}

    def start(self, settings: ErrorSettings) -> ErrorTests:
        return ErrorTests(
            ThresholdTest.new(settings.max_error_rate), ThresholdTest.new(settings.max_error_rate)
        )

    def add(
        self, tests: ErrorTests, settings: ErrorSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> ErrorTests:
        candidate = tests.candidate.update(*ours.counted(plan.client_units))
        lower, upper = tests.bounds
        new_lower, new_upper = error_rate_bounds(
            candidate.events, candidate.requests, plan.alpha, settings.max_error_rate
        )
        return ErrorTests(
            candidate,
            tests.baseline.update(*theirs.counted(plan.client_units)),
            (max(lower, new_lower), min(upper, new_upper)),
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


def _rate(tests: ErrorTests, settings: ErrorSettings, plan: Plan, moment: Moment) -> Check:
    test, most = tests.candidate, settings.max_error_rate
    lower, upper = tests.bounds
    failing = fired(test.log_evalue, plan.log_bound)
    shared = baseline_fired(plan, tests.baseline)
    counts = f"{test.events} errors in {test.requests} candidate {units(plan)} this rollout"
    if failing:
        reason = (
            f"error rate above {most:.2%}: log e-value {test.log_evalue:.2f} >= "
            f"{plan.log_bound:.2f} (alpha {plan.alpha:.2%}), {counts}, "
            f"anytime {1 - plan.alpha:.1%} {confidence(lower, upper)}"
        )
        verdict, bound = Verdict.FAIL, lower
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
    return Check(ERROR_RATE, verdict, rate, test.requests, bound, most,
                 shared_reason(reason, failing and shared), test.log_evalue, plan.log_bound,
                 failing and shared)  # fmt: skip


def _change(tests: ErrorTests, settings: ErrorSettings, plan: Plan) -> Check:
    test, baseline, most = tests.candidate, tests.baseline, settings.max_error_rate
    failing = fired(test.log_detector, plan.log_detector_bound)
    shared = failing and (
        fired(baseline.log_detector, plan.log_detector_bound) or fired(baseline.log_evalue, plan.log_bound)
    )
    if failing:
        reason = (
            f"the error rate rose above {most:.2%}: change detector log statistic "
            f"{test.log_detector:.2f} >= {plan.log_detector_bound:.2f}"
        )
    else:
        reason = f"no change above {most:.2%} ({test.steps} looks with traffic)"
    verdict = Verdict.FAIL if failing else Verdict.PASS
    return Check(ERROR_RATE_CHANGE, verdict, None, test.requests, None, most,
                 shared_reason(reason, shared), test.log_detector, plan.log_detector_bound, shared)  # fmt: skip
