"""structure: the candidate's malformed answers (empty, JSON or tool arguments that do not parse,
gateway/quality/structure.py) against the baseline's share, at most max_structure_ratio times. Pure.

Captured answers per randomised segment both variants reached in the look (in a shadow stage, the
copies against their originals). Reported where answers are captured (a shadow stage, or
`capture_percent` live); with none compared yet it holds: a form nobody checked is no pass. The answers
cut at the token limit are counted beside it and shown (the length_cut check tests them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.metrics.observations import CUT, MALFORMED, STRUCTURED
from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.checks.common import fired, randomised, ratio_of, structure_quality
from gateway.rollout.increments import VariantLook
from gateway.rollout.sequential import RatioTest
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

STRUCTURE = "structure"


@dataclass(frozen=True)
class StructureSettings:
    max_ratio: float
    live: bool  # live answers are captured (capture_percent > 0): it reports past the shadow stage


@dataclass(frozen=True)
class StructureTests:
    test: RatioTest
    cuts: tuple[int, int, int, int] = (0, 0, 0, 0)  # checked and cut: the candidate's, the baseline's
    kind: Literal["structure"] = "structure"


class Structure:
    name = STRUCTURE
    checks = (STRUCTURE,)
    signals = (STRUCTURED, MALFORMED, CUT)
    budgeted = True
    detectors = 0

    def settings(self, spec: RolloutSpec) -> StructureSettings | Off:
        quality = structure_quality(spec)
        if isinstance(quality, Off):
            return quality
        return StructureSettings(quality.max_structure_ratio, quality.capture_percent > 0)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        quality = spec.analysis.quality
        if quality is None:  # only with a quality section, so earlier states keep their keys
            return {}
        return {"quality": {"structure": quality.max_structure_ratio if quality.structure else None}}

    def start(self, settings: StructureSettings) -> StructureTests:
        return StructureTests(RatioTest.new(settings.max_ratio))

    def add(
        self,
        tests: StructureTests,
        settings: StructureSettings,
        plan: Plan,
        ours: VariantLook,
        theirs: VariantLook,
    ) -> StructureTests:
        mine, other = randomised(ours.structure, plan), randomised(theirs.structure, plan)
        strata = [(*mine[segment][:2], *other[segment][:2]) for segment in sorted(set(mine) & set(other))]
        (n_ours, cut_ours), (n_theirs, cut_theirs) = _cuts(ours), _cuts(theirs)
        before = tests.cuts
        cuts = (before[0] + n_ours, before[1] + cut_ours, before[2] + n_theirs, before[3] + cut_theirs)
        return StructureTests(tests.test.update(strata), cuts)

    def verdicts(
        self, tests: StructureTests, settings: StructureSettings, plan: Plan, moment: Moment
    ) -> Sequence[Check]:
        return [_verdict(tests, settings.max_ratio, plan)] if moment.shadowing or settings.live else []


def _cuts(look: VariantLook) -> tuple[int, int]:
    """(answers checked, cut at the token limit) over every segment: shown beside the test."""
    return sum(n for n, _, _ in look.structure.values()), sum(c for _, _, c in look.structure.values())


def _verdict(tests: StructureTests, most: float, plan: Plan) -> Check:
    test = tests.test
    ours, ours_cut, theirs, theirs_cut = tests.cuts
    counts = (
        f"{test.candidate_events} of {test.candidate_requests} candidate answers malformed against "
        f"{test.baseline_events} of {test.baseline_requests} of the baseline's; cut at the token limit: "
        f"{ours_cut} of {ours} against {theirs_cut} of {theirs} (length_cut tests them, with max_cut_ratio)"
    )
    if not test.candidate_requests:
        why = "no captured answers of both variants compared yet (is `analysis.quality` capturing any?)"
        return Check(
            STRUCTURE, Verdict.INCONCLUSIVE, None, 0, None, most, why, test.log_evalue, plan.log_bound
        )
    ratio = ratio_of(
        (test.candidate_requests, test.candidate_events), (test.baseline_requests, test.baseline_events)
    )
    failing = fired(test.log_evalue, plan.log_bound)
    reason = (
        f"malformed answers (empty, JSON or tool arguments that do not parse) "
        f"{'above' if failing else 'not shown above'} {most:g}x the baseline's: log e-value "
        f"{test.log_evalue:.2f} vs {plan.log_bound:.2f}; {counts}"
    )
    verdict = Verdict.FAIL if failing else Verdict.PASS
    return Check(STRUCTURE, verdict, ratio, test.candidate_requests, None, most, reason,
                 test.log_evalue, plan.log_bound)  # fmt: skip
