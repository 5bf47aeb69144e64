"""length_cut: the candidate's answers cut at the request's token limit, against the baseline's share, at
most `quality.max_cut_ratio` times. Pure.

A candidate that rambles, or no longer emits its stop token, runs into its clients' `max_tokens` more
often: each answer still parses, so the structure check sees nothing, yet a client gets half an answer.
Clients that set a low limit cut both variants' answers alike, which is why the share is tested against
the baseline's (a ratio test per randomised segment both reached in the look, like structure) and not
against a fixed rate. Reported where answers are captured (a shadow stage, or `capture_percent` live);
with none compared yet it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.metrics.observations import CUT, STRUCTURED
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import fired, randomised, ratio_of
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import RatioTest
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

LENGTH_CUT = "length_cut"


@dataclass(frozen=True)
class CutSettings:
    max_ratio: float
    live: bool  # live answers are captured (capture_percent > 0): it reports past the shadow stage


@dataclass(frozen=True)
class CutTests:
    test: RatioTest
    kind: Literal["length_cut"] = "length_cut"


class LengthCut:
    name = LENGTH_CUT
    checks = (LENGTH_CUT,)
    signals = (STRUCTURED, CUT)
    budgeted = True
    detectors = 0

    def settings(self, spec: RolloutSpec) -> CutSettings | Off:
        quality = spec.analysis.quality
        if quality is None or quality.max_cut_ratio is None:
            return Off("analysis.quality.max_cut_ratio is null")
        return CutSettings(quality.max_cut_ratio, quality.capture_percent > 0)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        quality = spec.analysis.quality
        if quality is None or quality.max_cut_ratio is None:  # absent until set: earlier keys stand
            return {}
        return {"quality": {"max_cut_ratio": quality.max_cut_ratio}}

    def start(self, settings: CutSettings) -> CutTests:
        return CutTests(RatioTest.new(settings.max_ratio))

    def add(
        self, tests: CutTests, settings: CutSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> CutTests:
        mine, other = randomised(ours.structure, plan), randomised(theirs.structure, plan)
        strata = [
            (mine[segment][0], mine[segment][2], other[segment][0], other[segment][2])
            for segment in sorted(set(mine) & set(other))
        ]
        return CutTests(tests.test.update(strata))

    def verdicts(self, tests: CutTests, settings: CutSettings, plan: Plan, moment: Moment) -> Sequence[Check]:
        if not (moment.shadowing or settings.live):
            return []
        test, most = tests.test, settings.max_ratio
        if not test.candidate_requests:
            why = "no captured answers of both variants compared yet (is `analysis.quality` capturing any?)"
            return [
                Check(
                    LENGTH_CUT,
                    Verdict.INCONCLUSIVE,
                    None,
                    0,
                    None,
                    most,
                    why,
                    test.log_evalue,
                    plan.log_bound,
                )
            ]
        ratio = ratio_of(
            (test.candidate_requests, test.candidate_events), (test.baseline_requests, test.baseline_events)
        )
        failing = fired(test.log_evalue, plan.log_bound)
        reason = (
            f"answers cut at the token limit {'above' if failing else 'not shown above'} {most:g}x the "
            f"baseline's share: log e-value {test.log_evalue:.2f} vs {plan.log_bound:.2f}; "
            f"{test.candidate_events} of {test.candidate_requests} candidate answers cut against "
            f"{test.baseline_events} of {test.baseline_requests} of the baseline's"
        )
        verdict = Verdict.FAIL if failing else Verdict.PASS
        return [Check(LENGTH_CUT, verdict, ratio, test.candidate_requests, None, most, reason,
                      test.log_evalue, plan.log_bound)]  # fmt: skip
