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

Which checks run, and with what settings, each check says for itself (gateway/rollout/checks/table.py);
here they are collected, the budget is split, and the tests' identity (the plan's key) is made from
what every check says defines its tests.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from gateway.metrics.observations import UNLABELLED
from gateway.names import DEFAULT_SEGMENT
from gateway.rollout import sequential
from gateway.rollout.checks.base import Off, Plan
from gateway.rollout.checks.table import CHECK_NAMES, CHECKS
from gateway.spec.evidence_gates import evidence_margin
from gateway.spec.model import RolloutSpec, SpecError

__all__ = ["CHECK_NAMES", "NOT_WORSE", "Plan", "plan_for", "roles"]

NOT_WORSE = (
    "not_worse"  # the evidence gate's non-inferiority test, not a check (gateway/rollout/not_worse.py)
)


def roles(spec: RolloutSpec) -> tuple[str, str]:
    """(baseline, candidate): the baseline is `retries.fallback`, else the variant named `baseline`;
    the candidate is the first other variant. SpecError if the spec has no baseline."""
    baseline = spec.baseline
    if baseline is None:
        raise SpecError("the rollout needs a baseline: set retries.fallback or name a variant `baseline`")
    return baseline, next(v for v in spec.variants if v != baseline)


def plan_for(spec: RolloutSpec) -> Plan:
    analysis = spec.analysis
    baseline, candidate = roles(spec)
    settings: dict[str, Any] = {}
    off: list[tuple[str, str]] = []
    for row in CHECKS:
        found = row.settings(spec)
        if isinstance(found, Off):
            off += [(name, found.why) for name in row.checks]
        else:
            settings[row.name] = found
    tests = [row.name for row in CHECKS if row.budgeted and row.name in settings]
    margin = evidence_margin(spec.strategy)
    if margin is not None:  # approval: evidence spends a share too (its false approvals)
        tests.append(NOT_WORSE)
    alpha = analysis.false_rollback_budget / len(tests)
    randomised = {DEFAULT_SEGMENT} | {rule.value for rule in spec.routing.rules if rule.weights is not None}
    if not spec.routing.rules:
        randomised.add(UNLABELLED)  # every routed request was split at random (probes' still mix in)
    identity = {
        "baseline": baseline,
        "candidate": candidate,
        "candidate_variant": spec.variants[candidate].model_dump(mode="json"),
        "tests": tests,
        "budget": analysis.false_rollback_budget,
        "segments": sorted(randomised),
        # only for answers, so the tests of rollouts saved on histograms before the setting existed go on
        **({"latency_source": analysis.latency_source} if analysis.latency_source != "histograms" else {}),
        **({"client_units": True} if spec.routing.affinity else {}),  # likewise: absent without cohorts
        **({"not_worse": margin.model_dump(mode="json")} if margin is not None else {}),  # likewise
    }
    for row in CHECKS:
        identity = _merged(identity, row.identity(spec))
    detectors = sum(row.detectors for row in CHECKS if row.name in settings)
    return Plan(
        baseline=baseline,
        candidate=candidate,
        tests=tuple(tests),
        off=tuple(off),
        settings=settings,
        alpha=alpha,
        max_error_rate=analysis.max_error_rate,
        exact_latency=analysis.latency_source == "answers",
        client_units=bool(spec.routing.affinity),
        randomised_segments=frozenset(randomised),
        log_bound=math.log(1 / alpha),
        # The change detectors share the stated mean time between false alarms: each alarms at n times
        # its share's horizon, so together at most 1.
        log_detector_bound=sequential.detector_log_threshold(
            analysis.mean_time_between_false_alarms, analysis.look_interval
        )
        + math.log(max(detectors, 1)),
        stage_requests=sequential.requests_needed(
            analysis.max_error_rate, analysis.min_detectable_error_rate, alpha
        ),
        key=hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16],
        not_worse=None
        if margin is None
        else margin.model_copy(update={"max_error_rate": margin.max_error_rate or analysis.max_error_rate}),
    )


def _merged(into: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """`into` with `more` over it, sections (mappings) merged key by key."""
    merged = dict(into)
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
