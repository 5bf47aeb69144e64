"""judge: the candidate's losses among the judge's decisive verdicts on its shadow pairs, against
`quality.judge.max_loss`. Pure. Ties are counted apart: they show the judge was asked, not that either
answer was worse. Reported in a shadow stage only; fails once the loss share is shown above max_loss,
passes once the judge gave MIN_VERDICTS verdicts without that (identical answers are a tie).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.metrics.observations import JUDGED, LOST, TIED
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import fired, judge_of
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import ThresholdTest
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

JUDGE = "judge"
MIN_VERDICTS = 20  # the judge's verdicts (ties too) a shadow stage needs before the check can pass


@dataclass(frozen=True)
class JudgeSettings:
    max_loss: float


@dataclass(frozen=True)
class JudgeTests:
    test: ThresholdTest
    ties: int = 0
    kind: Literal["judge"] = "judge"


class Judge:
    name = JUDGE
    checks = (JUDGE,)
    signals = (JUDGED, LOST, TIED)
    budgeted = True
    detectors = 0

    def settings(self, spec: RolloutSpec) -> JudgeSettings | Off:
        judge = judge_of(spec)
        return judge if isinstance(judge, Off) else JudgeSettings(judge.max_loss)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        quality = spec.analysis.quality
        if quality is None:  # only with a quality section, so earlier states keep their keys
            return {}
        return {"quality": {"judge": quality.judge.max_loss if quality.judge is not None else None}}

    def start(self, settings: JudgeSettings) -> JudgeTests:
        return JudgeTests(ThresholdTest.new(settings.max_loss))

    def add(
        self, tests: JudgeTests, settings: JudgeSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> JudgeTests:
        return JudgeTests(tests.test.update(ours.judged, ours.lost), tests.ties + ours.tied)

    def verdicts(
        self, tests: JudgeTests, settings: JudgeSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        if not moment.shadowing:
            return []
        test, most = tests.test, settings.max_loss
        verdicts = test.requests + tests.ties
        share = test.events / test.requests if test.requests else None
        counts = f"the candidate lost {test.events} of {test.requests} decisive verdicts ({tests.ties} ties)"
        if fired(test.log_evalue, plan.log_bound):
            verdict, why = Verdict.FAIL, f"losses above {most:.0%}: log e-value {test.log_evalue:.2f}"
        elif verdicts < MIN_VERDICTS:
            last = f"; the judge's last call: {moment.judge_problem}" if moment.judge_problem else ""
            verdict, why = (
                Verdict.INCONCLUSIVE,
                f"{verdicts} of the {MIN_VERDICTS} verdicts a pass needs{last}",
            )
        else:
            verdict, why = Verdict.PASS, f"no evidence of losses above {most:.0%}"
        return [Check(JUDGE, verdict, share, verdicts, None, most, f"{counts}: {why}",
                      test.log_evalue, plan.log_bound)]  # fmt: skip
