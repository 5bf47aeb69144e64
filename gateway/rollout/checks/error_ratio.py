"""error_ratio: the candidate's error rate against the baseline's, at most max_error_ratio times. Pure.

Both variants' attempts and failures per look, the look's realised request share as the null
(sequential/errors.py RatioTest): a shared incident, or a new split, cancels out. Envoy's cluster
counters do not say which header segment an attempt came from, so the test runs only where the spec
has no header rule at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.metrics.observations import ERRORS, REQUESTS, UNIT_ERRORS, UNITS
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import fired, ratio_of
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import RatioTest
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

ERROR_RATIO = "error_ratio"


@dataclass(frozen=True)
class RatioSettings:
    max_ratio: float


@dataclass(frozen=True)
class RatioTests:
    test: RatioTest
    kind: Literal["error_ratio"] = "error_ratio"


class ErrorRatio:
    name = ERROR_RATIO
    checks = (ERROR_RATIO,)
    signals = (REQUESTS, ERRORS, UNITS, UNIT_ERRORS)
    budgeted = True
    detectors = 0

    def settings(self, spec: RolloutSpec) -> RatioSettings | Off:
        if spec.analysis.max_error_ratio is None:
            return Off("max_error_ratio is null")
        if spec.routing.rules:
            return Off("header rules route segments apart and Envoy's counters do not split them")
        return RatioSettings(spec.analysis.max_error_ratio)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        return {"max_error_ratio": spec.analysis.max_error_ratio}

    def start(self, settings: RatioSettings) -> RatioTests:
        return RatioTests(RatioTest.new(settings.max_ratio))

    def add(
        self, tests: RatioTests, settings: RatioSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> RatioTests:
        stratum = (*ours.counted(plan.client_units), *theirs.counted(plan.client_units))
        return RatioTests(tests.test.update([stratum]))

    def verdicts(
        self, tests: RatioTests, settings: RatioSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        test, most = tests.test, settings.max_ratio
        ours = (test.candidate_requests, test.candidate_events)
        theirs = (test.baseline_requests, test.baseline_events)
        failing = fired(test.log_evalue, plan.log_bound)
        reason = (
            f"candidate errors {'above' if failing else 'not shown above'} {most:g}x the "
            f"baseline's: log e-value {test.log_evalue:.2f} vs {plan.log_bound:.2f}; "
            f"{ours[1]}/{ours[0]} against {theirs[1]}/{theirs[0]} (looks both variants had traffic)"
        )
        verdict = Verdict.FAIL if failing else Verdict.PASS
        return [Check(ERROR_RATIO, verdict, ratio_of(ours, theirs), ours[0], None, most, reason,
                      test.log_evalue, plan.log_bound)]  # fmt: skip
