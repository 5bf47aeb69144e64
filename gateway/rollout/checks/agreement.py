"""shadow_agreement: greedy shadow answers that differ from the baseline's, against max_disagreement.
Pure. The pairs compared at the gateway (`quality.max_greedy_disagreement`, any server), else
graystack's servers' own comparison (1 - `min_shadow_agreement`). Reported in a shadow stage only (after
it no copy is compared, and a check left inconclusive would hold every later stage); it passes once the
disagreement's anytime upper bound is below the threshold: a comparator that saw nothing is no pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.metrics.observations import COMPARED, DIFFERED
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import fired, greedy_disagreement
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import ThresholdTest, error_rate_bounds
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

SHADOW_AGREEMENT = "shadow_agreement"


@dataclass(frozen=True)
class AgreementSettings:
    max_disagreement: float


@dataclass(frozen=True)
class AgreementTests:
    test: ThresholdTest
    kind: Literal["shadow_agreement"] = "shadow_agreement"


class ShadowAgreement:
    name = SHADOW_AGREEMENT
    checks = (SHADOW_AGREEMENT,)
    signals = (COMPARED, DIFFERED)
    budgeted = True
    detectors = 0

    def settings(self, spec: RolloutSpec) -> AgreementSettings | Off:
        most = greedy_disagreement(spec)
        return most if isinstance(most, Off) else AgreementSettings(most)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        quality = spec.analysis.quality
        found: dict[str, Any] = {"min_shadow_agreement": spec.analysis.min_shadow_agreement}
        if quality is not None:  # only with a quality section, so earlier states keep their keys
            found["quality"] = {"max_greedy_disagreement": quality.max_greedy_disagreement}
        return found

    def start(self, settings: AgreementSettings) -> AgreementTests:
        return AgreementTests(ThresholdTest.new(settings.max_disagreement))

    def add(
        self,
        tests: AgreementTests,
        settings: AgreementSettings,
        plan: Plan,
        ours: VariantLook,
        theirs: VariantLook,
    ) -> AgreementTests:
        return AgreementTests(tests.test.update(ours.compared, ours.differed))

    def verdicts(
        self, tests: AgreementTests, settings: AgreementSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        return [_verdict(tests.test, settings.max_disagreement, plan)] if moment.shadowing else []


def _verdict(test: ThresholdTest, most: float, plan: Plan) -> Check:
    agreed = test.requests - test.events
    lower, upper = error_rate_bounds(test.events, test.requests, plan.alpha, most)
    share = agreed / test.requests if test.requests else None
    counts = f"{agreed} of {test.requests} shadow answers equal the baseline's"
    bound: float | None
    if fired(test.log_evalue, plan.log_bound):
        verdict, bound = Verdict.FAIL, 1 - lower
        why = f"disagreement above {most:.1%}: log e-value {test.log_evalue:.2f}"
    elif upper < most:
        verdict, bound = Verdict.PASS, 1 - upper
        why = f"disagreement below {most:.1%} with {1 - plan.alpha:.1%} confidence"
    elif not test.requests:
        verdict, bound = Verdict.INCONCLUSIVE, None
        why = (
            "no shadow answer compared with the baseline's yet (greedy requests only; is the candidate "
            "started with `serve --compare-with`?)"
        )
    else:
        verdict, bound = Verdict.INCONCLUSIVE, 1 - upper
        why = f"cannot tell the disagreement from {most:.1%} yet"
    return Check(SHADOW_AGREEMENT, verdict, share, test.requests, bound, 1 - most, f"{counts}: {why}",
                 test.log_evalue, plan.log_bound)  # fmt: skip
