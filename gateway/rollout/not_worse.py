"""The evidence an `approval: evidence` gate waits for: the candidate shown not worse than the
baseline by more than the spec's margin (gateway/spec/approval.py). Pure.

"Not worse" is an intersection of three one-sided non-inferiority hypotheses, each rejected by an
anytime-valid test at the plan's alpha:
- TTFT: H0 "the candidate's first token is more than (1 + max_slowdown) x the baseline's, in
  distribution", rejected by NotSlowerTest (sequential/noninferior.py) on each answer's exact time,
  per randomised stratum and look, as ttft_vs_baseline reads them;
- inter-token latency: the same, on each request's mean token gap;
- errors: H0 "the candidate's error rate is at least max_error_rate" (the spec's rollback threshold
  unless the margin names a lower one), rejected once the rate's anytime confidence sequence (the
  Beta-mixture one error_rate reports) lies wholly below it.
The step is approved when all three are rejected. A candidate worse in any one way lies in that
way's H0, whose test rejects with chance at most alpha over the whole rollout (Ville), so the gate
approves it with chance at most alpha: an intersection-union test needs no split of its level, and
the gate spends one share of the rollout's budget (plan.NOT_WORSE). Errors are judged against an
absolute rate, not the baseline's: a ratio test conditions on the errors that happened, so a healthy
candidate beside a baseline that hardly fails (the case a gate is for) would never show anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, xlogy

from gateway.metrics.observations import segment_of
from gateway.rollout.increments import VariantLook
from gateway.rollout.plan import Plan
from gateway.rollout.sequential import NotSlowerTest, ThresholdTest, by_stratum


@dataclass(frozen=True)
class NotWorse:
    """The gate's two latency tests, carried in the rollout's evidence for the whole rollout."""

    ttft: NotSlowerTest
    itl: NotSlowerTest


@dataclass(frozen=True)
class Part:
    """One of the three hypotheses: its evidence against its bound, and the samples behind it."""

    name: str
    log_evalue: float
    samples: int
    shown: bool


@dataclass(frozen=True)
class Judgement:
    """Whether the candidate is shown not worse (every part shown), and why."""

    parts: tuple[Part, ...]
    log_bound: float

    @property
    def shown(self) -> bool:
        return all(part.shown for part in self.parts)

    def summary(self) -> str:
        return ", ".join(
            f"{p.name} {'shown' if p.shown else 'not shown'} (log e-value {p.log_evalue:.2f} vs "
            f"{self.log_bound:.2f}, {p.samples} samples)"
            for p in self.parts
        )


def start_tests(plan: Plan) -> NotWorse | None:
    """New tests where the plan has an evidence gate."""
    if plan.not_worse is None:
        return None
    slowdown = plan.not_worse.max_slowdown
    return NotWorse(NotSlowerTest.new(slowdown), NotSlowerTest.new(slowdown))


def with_look(tests: NotWorse | None, plan: Plan, ours: VariantLook, theirs: VariantLook) -> NotWorse | None:
    """The tests after one look: the answers' exact times per stratum both variants reached, routed
    traffic split at random only (what ttft_vs_baseline compares)."""
    if tests is None:
        return None
    ttft = by_stratum(_randomised(ours.ttft_values, plan), _randomised(theirs.ttft_values, plan))
    itl = by_stratum(_randomised(ours.itl_values, plan), _randomised(theirs.itl_values, plan))
    return NotWorse(tests.ttft.update(ttft), tests.itl.update(itl))


def _randomised(values: Mapping[str, Sequence[float]], plan: Plan) -> dict[str, Sequence[float]]:
    return {name: v for name, v in values.items() if segment_of(name) in plan.randomised_segments}


def below_log_evalue(events: np.ndarray, requests: np.ndarray, most: float) -> np.ndarray:
    """Evidence that the error rate is below `most`: the Beta(1, 1/most - 1) mixture's log likelihood
    ratio against the rate `most` (budget.beta_binomial_log_lr), where the observed rate is below it
    (else 0). At or above log(1/alpha) the anytime confidence sequence lies wholly below `most`.
    Vectorised: the bench runs it over thousands of runs."""
    s, n = np.asarray(events, dtype=float), np.asarray(requests, dtype=float)
    a, b = 1.0, 1.0 / most - 1.0
    log_lr = betaln(a + s, b + n - s) - betaln(a, b) - xlogy(s, most) - xlogy(n - s, 1 - most)
    return np.where(s < most * n, log_lr, 0.0)


def judge(plan: Plan, tests: NotWorse | None, errors: ThresholdTest) -> Judgement | None:
    """The gate's judgement after the last look (None: the plan has no evidence gate, or no tests yet)."""
    if plan.not_worse is None or tests is None:
        return None
    most = plan.not_worse.max_error_rate or plan.max_error_rate
    log_errors = float(below_log_evalue(np.asarray(errors.events), np.asarray(errors.requests), most))
    bound = plan.log_bound
    parts = (
        Part(
            "ttft", tests.ttft.log_evalue, tests.ttft.candidate_requests, _shown(tests.ttft.log_evalue, bound)
        ),
        Part("itl", tests.itl.log_evalue, tests.itl.candidate_requests, _shown(tests.itl.log_evalue, bound)),
        Part("errors", log_errors, errors.requests, _shown(log_errors, bound)),
    )
    return Judgement(parts, bound)


def _shown(log_evalue: float, bound: float) -> bool:
    return math.isfinite(log_evalue) and log_evalue >= bound
