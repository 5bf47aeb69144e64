"""Pure views of a rollout's state, for the controller (gateway/rollout/controller.py) to apply and show:
the split the Gateway layer goes live with, and the rollout section of `graystack status`. No I/O.

The split: while the state has a weight, the controller owns the default split ({baseline: 100 - w,
candidate: w}, any other variant 0); in manual mode (weight None) the spec's own and the operator's
flips stand. While rolled back every header segment goes to the baseline too (the state's weight
covers the default split only); a retry gives the segments back their own splits. The controller
compares the split it wants with the one live after every step and pushes on a difference, so a push
that was refused (an invalid composition) is tried again at the next interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from gateway.rollout.analysis import Check
from gateway.rollout.checks.experiment import (
    EXPERIMENT,
    Difference,
    ExperimentSettings,
    ExperimentTests,
    report,
)
from gateway.rollout.evidence import busier_looks, error_bounds
from gateway.rollout.gates import evidence_judgement
from gateway.rollout.plan import plan_for, roles
from gateway.rollout.rollout_state import ADVANCING, Phase, RolloutState
from gateway.rollout.stages import hold_needed
from gateway.rollout.status import (
    AlertStatus,
    CapacityStatus,
    DecisionStatus,
    DifferenceStatus,
    EvidenceStatus,
    ExperimentStatus,
    GateStatus,
    HoldStatus,
    NotWorsePart,
    NotWorseStatus,
    RolloutStatus,
    TransitionStatus,
)
from gateway.spec.model import Mirror, RolloutSpec, SpecError
from gateway.spec.split import RolloutSplit
from gateway.xds.status import DisconnectedProxy

HISTORY_SHOWN = 10  # recent transitions shown in status


def rollout_split(spec: RolloutSpec, state: RolloutState) -> RolloutSplit:
    """The Gateway layer for `state` (see the module docstring)."""
    if state.weight is None:
        return RolloutSplit()
    baseline, candidate = roles(spec)
    weights = dict.fromkeys(spec.variants, 0) | {baseline: 100 - state.weight, candidate: state.weight}
    mirror = Mirror(variant=candidate, percent=state.shadow_percent) if state.shadow_percent else None
    return RolloutSplit(weights, baseline if state.phase == Phase.ROLLED_BACK else None, mirror)


def stage_of(state: RolloutState) -> str:
    """The stage a look's counts belong to (a pause does not start a new one)."""
    return f"{state.phase.value}:{state.step}"


def check_dict(check: Check) -> dict[str, Any]:
    return {**asdict(check), "verdict": check.verdict.value}


def rollout_status(
    spec: RolloutSpec,
    state: RolloutState,
    now: float,
    *,
    guard_off: str | None,
    last_rollback_seconds: float | None,
    last_decision: dict[str, Any] | None,
    alerts: list[dict[str, Any]],
    tests_started: str | None,
    store: str,
    save_error: str | None,
    rollback_pending: list[DisconnectedProxy] | None = None,
    capacity: dict[str, Any] | None = None,
) -> RolloutStatus:
    """The rollout section of `graystack status` (and GET /v1/status); the controller keeps its last
    decision, alerts and capacity look as dicts (they feed its metrics), validated into the models here."""
    baseline: str | None
    candidate: str | None
    try:
        baseline, candidate = roles(spec)
    except SpecError:
        baseline = candidate = None
    return RolloutStatus(
        guard="on" if guard_off is None else "off",
        guard_off_reason=guard_off,
        baseline=baseline,
        candidate=candidate,
        phase=state.phase.value,
        label=state.label(),
        step=state.step,
        steps=len(spec.strategy.steps) if spec.strategy else 0,
        weight=state.weight,
        shadow_percent=state.shadow_percent,
        paused=state.paused,
        hold=HoldStatus(elapsed=round(state.hold_elapsed(now), 3), needed=hold_needed(spec, state)),
        errors=state.errors,
        reason=state.reason,
        rollback_in_flight=state.rollback_started is not None,
        last_rollback_seconds=last_rollback_seconds,
        rollback_pending=rollback_pending or [],
        last_decision=DecisionStatus.model_validate(last_decision) if last_decision else None,
        alerts=[AlertStatus.model_validate(alert) for alert in alerts],
        history=[TransitionStatus(**asdict(t)) for t in state.history[-HISTORY_SHOWN:]],
        evidence=evidence_status(spec, state, tests_started),
        state_store=store,
        state_save_error=save_error,
        capacity=CapacityStatus.model_validate(capacity) if capacity is not None else None,
        gate=gate_status(spec, state),
        experiment=experiment_status(spec, state, now),
    )


def gate_status(spec: RolloutSpec, state: RolloutState) -> GateStatus | None:
    """The next step's gates where one holds or answered (the approver reads the evidence beside it,
    in the last decision's checks)."""
    if state.awaiting is None and state.webhook is None:
        return None
    answer = state.webhook
    index = state.awaiting if state.awaiting is not None else answer.step if answer else 0
    steps = spec.strategy.steps if spec.strategy else []
    return GateStatus(
        step=index,
        weight=steps[index].weight if index < len(steps) else None,
        awaiting_approval=state.awaiting is not None,
        webhook_ok=None if answer is None else answer.ok,
        webhook_reason=None if answer is None else answer.reason,
        not_worse=_not_worse(spec, state) if state.awaiting is not None else None,
    )


def _not_worse(spec: RolloutSpec, state: RolloutState) -> NotWorseStatus | None:
    """What an awaiting evidence gate has shown so far (None: a manual gate)."""
    judgement = evidence_judgement(spec, state)
    if judgement is None:
        return None
    parts = [NotWorsePart(**asdict(part)) for part in judgement.parts]
    return NotWorseStatus(log_bound=judgement.log_bound, parts=parts)


def evidence_status(
    spec: RolloutSpec, state: RolloutState, tests_started: str | None
) -> EvidenceStatus | None:
    """What the tests hold: since when, this stage's requests against what it needs, the error
    rate's anytime confidence bounds, and the checks that do not run and why."""
    evidence = state.evidence
    try:
        plan = plan_for(spec)
    except SpecError:
        return None
    stage = evidence.stage if evidence is not None else None
    # an experiment's phase ends on its duration or its report, and a held incident on its end, never on
    # a stage's requests
    stage_ends = state.phase in ADVANCING - {Phase.EXPERIMENT} and state.incident is None
    needed = plan.stage_requests if stage_ends else None
    requests = stage.requests if stage is not None and stage.stage == stage_of(state) else 0
    return EvidenceStatus(
        started=None if evidence is None else evidence.started,
        why_started=tests_started,
        alpha=plan.alpha,
        tests=list(plan.tests),
        off=dict(plan.off),
        stage_requests=requests,
        stage_requests_needed=needed,
        extending=needed is not None and requests < needed,
        error_rate_bounds=None if evidence is None else list(error_bounds(evidence)),
        latency_looks_left_out=0 if evidence is None else busier_looks(evidence),
        incident=state.incident,
    )


def experiment_status(spec: RolloutSpec, state: RolloutState, now: float) -> ExperimentStatus | None:
    """The experiment's report from the state's evidence (None: the strategy is not an experiment)."""
    experiment = spec.strategy.experiment if spec.strategy is not None else None
    try:
        plan = plan_for(spec)
    except SpecError:
        return None
    settings = plan.settings.get(EXPERIMENT)
    if experiment is None or not isinstance(settings, ExperimentSettings):
        return None
    tests = state.evidence.tests.get(EXPERIMENT) if state.evidence is not None else None
    found = report(tests if isinstance(tests, ExperimentTests) else ExperimentTests(), settings)
    return ExperimentStatus(
        candidate=plan.candidate,
        baseline=plan.baseline,
        alpha=found.alpha,
        duration=experiment.duration,
        elapsed=round(state.hold_elapsed(now), 3) if state.phase == Phase.EXPERIMENT else None,
        end_on_decision=experiment.end_on_decision,
        concluded=state.phase == Phase.CONCLUDED,
        decided=found.decided,
        differences=[_difference(d) for d in found.differences],
        not_compared=list(found.not_compared),
        quality=[_difference(d) for d in found.quality],
        quality_not_compared=list(found.quality_not_compared),
    )


def _difference(d: Difference) -> DifferenceStatus:
    return DifferenceStatus(
        **{**asdict(d), "upper": d.upper if math.isfinite(d.upper) else None, "samples": list(d.samples)}
    )
