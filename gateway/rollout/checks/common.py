"""What several checks share: which strata a comparison may read, when a test fired, and the wording of
a shared incident and of missing measurements. Pure; no check imports another, they import this."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

from gateway.metrics.observations import segment_of
from gateway.rollout.checks.base import Off, Plan
from gateway.rollout.increments import Histogram
from gateway.rollout.sequential import ThresholdTest
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec
from gateway.spec.quality import Judge as QualityJudge
from gateway.spec.quality import Quality
from gateway.spec.queries import PROBED

V = TypeVar("V")


def fired(log_value: float, bound: float) -> bool:
    return math.isfinite(log_value) and log_value >= bound


def randomised(strata: Mapping[str, V], plan: Plan) -> dict[str, V]:
    """The strata of randomised traffic: the ones a comparison may use."""
    return {name: v for name, v in strata.items() if segment_of(name) in plan.randomised_segments}


def probed(strata: Mapping[str, Histogram]) -> dict[str, Histogram]:
    """The probes' own strata: their synthetic requests, the same one to every pod."""
    return {name: h for name, h in strata.items() if segment_of(name) == PROBED}


def observed(strata: Mapping[str, Histogram]) -> bool:
    return any(h.total for h in strata.values())


def baseline_fired(plan: Plan, baseline: ThresholdTest) -> bool:
    """The same test on the baseline's own traffic fired (its e-value or its detector): shared."""
    return fired(baseline.log_evalue, plan.log_bound) or fired(baseline.log_detector, plan.log_detector_bound)


def shared_reason(reason: str, shared: bool) -> str:
    return f"shared incident (the baseline's own traffic fires the same test): {reason}" if shared else reason


def threshold_check(name: str, test: ThresholdTest, plan: Plan, shared: bool, reason: str) -> Check:
    """A check of `test` against the plan's bound: fail once it fired."""
    verdict = Verdict.FAIL if fired(test.log_evalue, plan.log_bound) else Verdict.PASS
    rate = test.events / test.requests if test.requests else None
    return Check(name, verdict, rate, test.requests, None, test.p0, reason, test.log_evalue, plan.log_bound,
                 shared and verdict == Verdict.FAIL)  # fmt: skip


def measurements_missing(plan: Plan, answered: int, sent: int) -> str | None:
    """Why a latency check judged on the gateway's answers has nothing to judge though the candidate had
    `sent` requests and the gateway measured `answered` of its answers (its answers never reached the
    gateway): such a check holds, never passes. None otherwise."""
    if not plan.exact_latency or answered or not sent:
        return None
    return (
        f"measurements missing: Envoy sent the candidate {sent} requests and the gateway measured "
        "none of its answers (is Envoy's access log reaching the gateway's xDS port?): nothing to judge, "
        "so no pass"
    )


def answered(values: Mapping[str, Sequence[float]]) -> int:
    """The answers the gateway measured this look, any stratum."""
    return sum(map(len, values.values()))


# A latency check with nothing to judge neither holds a rollout nor passes it on evidence: a server that
# exports no latency histogram (not graystack's), or answers of one token (no inter-token gap), would
# otherwise hold every stage forever. Its samples (0) and this reason say so in status.
NO_LATENCY = (
    "no {what} observed from both variants on randomised traffic yet: nothing to judge (the servers' "
    "histograms (graystack's, vLLM's, or provider.histograms) feed it, else the probes' for TTFT; null in "
    "the spec turns it off)"
)


def ratio_of(ours: tuple[int, int], theirs: tuple[int, int]) -> float | None:
    """The candidate's rate over the baseline's, from (observations, events) each; None where undefined."""
    (n_ours, x_ours), (n_theirs, x_theirs) = ours, theirs
    if not n_ours or not n_theirs or not x_theirs:
        return None
    return (x_ours / n_ours) / (x_theirs / n_theirs)


# Whether each quality comparator is on: its check's row and the experiment's report read the same rule.


def greedy_disagreement(spec: RolloutSpec) -> float | Off:
    """The greedy disagreement tolerated: the gateway's pairs (`quality.max_greedy_disagreement`), else
    graystack's servers' own comparison (1 - `min_shadow_agreement`); Off where neither is set."""
    quality = spec.analysis.quality
    if quality is not None and quality.max_greedy_disagreement is not None:
        return quality.max_greedy_disagreement
    agreement = spec.analysis.min_shadow_agreement
    if agreement is None:
        return Off("neither quality.max_greedy_disagreement nor min_shadow_agreement is set")
    return 1 - agreement


def structure_quality(spec: RolloutSpec) -> Quality | Off:
    """The quality section where it checks the answers' structure; Off otherwise."""
    quality = spec.analysis.quality
    return Off("analysis.quality.structure is off") if quality is None or not quality.structure else quality


def judge_of(spec: RolloutSpec) -> QualityJudge | Off:
    """The judge's settings; Off where there is none."""
    quality = spec.analysis.quality
    return Off("analysis.quality has no judge") if quality is None or quality.judge is None else quality.judge
