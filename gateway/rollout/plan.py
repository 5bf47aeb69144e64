"""Which sequential tests a rollout runs, and at what level: derived from the spec alone. Pure.

The user states a false-rollback budget per rollout (`analysis.false_rollback_budget`); it is split
evenly across the tests that can roll back on evidence accumulated over the whole rollout (the union
bound: their chances of ever firing on a healthy candidate add up to at most the budget). The change
detectors (on errors, and on each latency comparison) have their own budget, a mean time between false
alarms, because they forget healthy history on purpose and so have no per-rollout bound
(docs/rollouts-and-analysis.md: `mean_time_between_false_alarms`); they share it evenly.

A test is only as valid as the randomisation behind it. Comparisons with the baseline use strata whose
traffic is split at random between the two: the default split, and each header segment with a split
of its own. A segment pinned to one variant is not a comparison (its traffic differs by construction),
nor is traffic that reached a server without passing a route (probes, direct clients). Envoy's cluster
counters do not say which segment an attempt came from, so the error-ratio test runs only where the
spec has no header rule at all; the latency comparisons read the model servers' histograms, which do
(their `segment` label, set from the header each route adds).

With cohorts (`routing.affinity`) a client's requests all go to its cohort's variant, so the unit that
is randomised is the client, not the request: the error tests then count each client once per variant
(gateway/metrics/client_units.py), and the latency tests read only those answers.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from gateway.metrics.observations import UNLABELLED
from gateway.names import DEFAULT_SEGMENT
from gateway.rollout import sequential
from gateway.spec.approval import Margin
from gateway.spec.evidence_gates import evidence_margin
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.quality import Quality
from gateway.spec.strategy import Analysis

ERROR_RATE = "error_rate"
ERROR_RATE_CHANGE = "error_rate_change"
ERROR_RATIO = "error_ratio"
TTFT_P95 = "ttft_p95"
TTFT_VS_BASELINE = "ttft_vs_baseline"
ITL_VS_BASELINE = "itl_vs_baseline"
WEIGHT_STATUS = "weight_status"
SHADOW_AGREEMENT = "shadow_agreement"
STRUCTURE = "structure"
JUDGE = "judge"
NOT_WORSE = (
    "not_worse"  # the evidence gate's non-inferiority test, not a check (gateway/rollout/not_worse.py)
)
CHECK_NAMES = (
    ERROR_RATE,
    ERROR_RATE_CHANGE,
    ERROR_RATIO,
    TTFT_P95,
    TTFT_VS_BASELINE,
    ITL_VS_BASELINE,
    WEIGHT_STATUS,
    SHADOW_AGREEMENT,
    STRUCTURE,
    JUDGE,
)


def roles(spec: RolloutSpec) -> tuple[str, str]:
    """(baseline, candidate): the baseline is `retries.fallback`, else the variant named `baseline`;
    the candidate is the first other variant. SpecError if the spec has no baseline."""
    baseline = spec.retries.fallback or ("baseline" if "baseline" in spec.variants else None)
    if baseline is None:
        raise SpecError("the rollout needs a baseline: set retries.fallback or name a variant `baseline`")
    return baseline, next(v for v in spec.variants if v != baseline)


@dataclass(frozen=True)
class Plan:
    baseline: str
    candidate: str
    tests: tuple[str, ...]  # the budgeted tests that run (each at `alpha`)
    off: tuple[tuple[str, str], ...]  # (check, why it does not run)
    alpha: float
    max_error_rate: float
    max_error_ratio: float | None
    max_latency_ratio: float | None
    exact_latency: bool  # the latency comparisons run on the answers' exact values, not on histograms
    client_units: bool  # cohorts assign clients: the tests count each client once (metrics/client_units.py)
    max_ttft_p95: float | None
    max_disagreement: float | None
    max_structure_ratio: float | None  # the structure check's bound (None: it does not run)
    structure_live: bool  # live answers are captured (capture_percent > 0): the check runs past shadow
    max_judge_loss: float | None  # the judge check's bound on the candidate's losses (None: no judge)
    randomised_segments: frozenset[str]  # segments whose traffic is split at random between the two
    log_bound: float  # log(1/alpha): a budgeted test fires at or above it
    log_detector_bound: float  # log A of the change detector
    stage_requests: int  # candidate requests a stage needs before it may end
    key: str  # identity of the tests: another key starts new ones
    not_worse: Margin | None = None  # an evidence gate's margin, max_error_rate resolved (None: no such gate)

    def runs(self, check: str) -> bool:
        return check in self.tests or check == ERROR_RATE_CHANGE


def plan_for(spec: RolloutSpec) -> Plan:
    analysis = spec.analysis
    baseline, candidate = roles(spec)
    off: list[tuple[str, str]] = []
    tests = [ERROR_RATE]
    if analysis.max_error_ratio is None:
        off.append((ERROR_RATIO, "max_error_ratio is null"))
    elif spec.routing.rules:
        off.append((ERROR_RATIO, "header rules route segments apart and Envoy's counters do not split them"))
    else:
        tests.append(ERROR_RATIO)
    if analysis.max_ttft_p95 is None:
        off.append((TTFT_P95, "max_ttft_p95 is null"))
    else:
        tests.append(TTFT_P95)
    if analysis.max_latency_ratio is None:
        off += [
            (TTFT_VS_BASELINE, "max_latency_ratio is null"),
            (ITL_VS_BASELINE, "max_latency_ratio is null"),
        ]
    else:
        tests += [TTFT_VS_BASELINE, ITL_VS_BASELINE]
    quality = analysis.quality
    disagreement = _max_disagreement(analysis)
    if disagreement is not None:
        tests.append(SHADOW_AGREEMENT)
    if quality is not None and quality.structure:
        tests.append(STRUCTURE)
    if quality is not None and quality.judge is not None:
        tests.append(JUDGE)
    if analysis.expected_weight_status is None and analysis.max_effective_window is None:
        off.append((WEIGHT_STATUS, "expected_weight_status is null: no probe is required"))
    margin = evidence_margin(spec.strategy)
    if margin is not None:  # approval: evidence spends a share too (its false approvals)
        tests.append(NOT_WORSE)
    alpha = analysis.false_rollback_budget / len(tests)
    randomised = {DEFAULT_SEGMENT} | {rule.value for rule in spec.routing.rules if rule.weights is not None}
    if not spec.routing.rules:
        randomised.add(UNLABELLED)  # every routed request was split at random (probes' still mix in)
    settings = {
        "baseline": baseline,
        "candidate": candidate,
        "candidate_variant": spec.variants[candidate].model_dump(mode="json"),
        "tests": tests,
        "budget": analysis.false_rollback_budget,
        "max_error_rate": analysis.max_error_rate,
        "max_error_ratio": analysis.max_error_ratio,
        "max_latency_ratio": analysis.max_latency_ratio,
        "max_ttft_p95": analysis.max_ttft_p95,
        "min_shadow_agreement": analysis.min_shadow_agreement,
        # only with a quality section, so the tests of rollouts saved before it existed go on
        **({"quality": _quality_settings(quality)} if quality is not None else {}),
        "segments": sorted(randomised),
        # only for answers, so the tests of rollouts saved on histograms before the setting existed go on
        **({"latency_source": analysis.latency_source} if analysis.latency_source != "histograms" else {}),
        **({"client_units": True} if spec.routing.affinity else {}),  # likewise: absent without cohorts
        **({"not_worse": margin.model_dump(mode="json")} if margin is not None else {}),  # likewise
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return Plan(
        baseline=baseline,
        candidate=candidate,
        tests=tuple(tests),
        off=tuple(off),
        alpha=alpha,
        max_error_rate=analysis.max_error_rate,
        max_error_ratio=analysis.max_error_ratio if ERROR_RATIO in tests else None,
        max_latency_ratio=analysis.max_latency_ratio,
        exact_latency=analysis.latency_source == "answers",
        client_units=bool(spec.routing.affinity),
        max_ttft_p95=analysis.max_ttft_p95,
        max_disagreement=disagreement,
        max_structure_ratio=quality.max_structure_ratio if STRUCTURE in tests and quality else None,
        structure_live=quality is not None and quality.capture_percent > 0,
        max_judge_loss=quality.judge.max_loss if quality is not None and quality.judge is not None else None,
        randomised_segments=frozenset(randomised),
        log_bound=math.log(1 / alpha),
        # The change detectors (errors, and the two latency comparisons' own) share the stated mean
        # time between false alarms: each alarms at n times its share's horizon, so together at most 1.
        log_detector_bound=sequential.detector_log_threshold(
            analysis.mean_time_between_false_alarms, analysis.look_interval
        )
        + math.log(1 + 2 * (analysis.max_latency_ratio is not None)),
        stage_requests=sequential.requests_needed(
            analysis.max_error_rate, analysis.min_detectable_error_rate, alpha
        ),
        key=key,
        not_worse=None
        if margin is None
        else margin.model_copy(update={"max_error_rate": margin.max_error_rate or analysis.max_error_rate}),
    )


def _max_disagreement(analysis: Analysis) -> float | None:
    """The greedy answers' largest tolerated disagreement: `quality.max_greedy_disagreement` (pairs
    compared at the gateway, any server), else 1 - `min_shadow_agreement` (graystack's servers' own
    comparison); None: not judged. One check either way, shadow_agreement."""
    quality = analysis.quality
    if quality is not None and quality.max_greedy_disagreement is not None:
        return quality.max_greedy_disagreement
    agreement = analysis.min_shadow_agreement
    return None if agreement is None else 1 - agreement


def _quality_settings(quality: Quality) -> dict[str, Any]:
    """What of `analysis.quality` defines the tests: the comparators' bounds, not what is captured or the
    judge's endpoint (moving the judge keeps its verdicts' evidence)."""
    return {
        "max_greedy_disagreement": quality.max_greedy_disagreement,
        "structure": quality.max_structure_ratio if quality.structure else None,
        "judge": quality.judge.max_loss if quality.judge is not None else None,
    }
