"""Where a rollout stands and how it enters a stage, for the state machine (gateway/rollout/machine.py). Pure.

Entering a stage starts a fresh hold (accrued, never recomputed: `fold`), and records a transition in the
state's history where the rollout now stands elsewhere. `reconcile` fits a state to the spec it now runs
under (an edit, or a restart with a changed file); `hold_needed` is the hold the current stage needs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.rollout import gates
from gateway.rollout.rollout_state import ADVANCING, Phase, RolloutState, Transition
from gateway.spec.model import RolloutSpec
from gateway.spec.strategy import Experiment, Strategy

HISTORY_LIMIT = 50  # transitions kept in the state (and so in the state file and in `graystack status`)


def fold(state: RolloutState, now: float) -> RolloutState:
    """The hold accrued up to `now` folded into `held` (a clock that went back adds nothing)."""
    if state.held_until is None:
        return state
    return replace(state, held=state.hold_elapsed(now), held_until=now)


def moved(state: RolloutState, now: float, reason: str, **changes: Any) -> RolloutState:
    """`state` with `changes`, the reason, and a history entry if it now stands somewhere else."""
    after = replace(state, reason=reason, **changes)
    if after.label() != state.label():
        entry = Transition(now, state.label(), after.label(), reason)
        after = replace(after, history=(*state.history, entry)[-HISTORY_LIMIT:])
    return after


def enter(
    state: RolloutState, now: float, reason: str, phase: Phase, index: int, weight: int | None, shadow: int
) -> RolloutState:
    """Enter a stage with a fresh hold; only the advancing phases hold, or keep a pause."""
    paused = state.paused and phase in ADVANCING
    accruing = phase in ADVANCING and not paused
    return moved(
        state, now, reason, phase=phase, step=index, weight=weight, shadow_percent=shadow, paused=paused,
        held=0.0, held_until=now if accruing else None, capacity_since=None, awaiting=None, webhook=None,
    )  # fmt: skip


def first_stage(spec: RolloutSpec, state: RolloutState, now: float, reason: str) -> RolloutState:
    """The strategy's first stage with fresh timers (an operator's pause, if any, stays)."""
    strategy = spec.strategy
    state = replace(state, errors=0, rollback_started=None)
    if strategy is None:
        return enter(state, now, reason, Phase.MANUAL, 0, None, 0)
    if strategy.experiment is not None:
        experiment = strategy.experiment
        weight = _experiment_weight(spec, experiment)
        return enter(state, now, reason, Phase.EXPERIMENT, 0, weight, experiment.mirror_percent)
    if strategy.shadow is not None:
        return enter(state, now, reason, Phase.SHADOW, 0, 0, strategy.shadow.percent)
    return _enter_step(spec, state, 0, now, reason)


def _experiment_weight(spec: RolloutSpec, experiment: Experiment) -> int:
    """The candidate's share in an experiment (the spec refuses one without a baseline)."""
    return experiment.candidate_weight(spec.baseline or "")


def _enter_step(spec: RolloutSpec, state: RolloutState, index: int, now: float, reason: str) -> RolloutState:
    """Step `index`, or promoted past the last step."""
    steps = strategy_of(spec).steps
    if index >= len(steps):
        return enter(state, now, reason, Phase.PROMOTED, len(steps) - 1, steps[-1].weight, 0)
    return enter(state, now, reason, Phase.PROGRESSING, index, steps[index].weight, 0)


def strategy_of(spec: RolloutSpec) -> Strategy:
    """The strategy of a rollout in an advancing phase (without one, `_reconcile` keeps it MANUAL)."""
    if spec.strategy is None:
        raise RuntimeError(f"rollout {spec.name}: an advancing phase without a strategy")
    return spec.strategy


def advance(spec: RolloutSpec, state: RolloutState, now: float, reason: str) -> RolloutState:
    if state.phase == Phase.EXPERIMENT:  # an experiment's next stage is its conclusion, never a weight
        concluded = f"experiment concluded: {reason}"  # its split and mirror stay: the counts go on
        return enter(state, now, concluded, Phase.CONCLUDED, 0, state.weight, state.shadow_percent)
    return _enter_step(spec, state, gates.next_step(state), now, reason)


def pause(state: RolloutState, now: float, reason: str) -> RolloutState:
    return moved(state, now, reason, paused=True, held_until=None)


def hold_needed(spec: RolloutSpec, state: RolloutState) -> float | None:
    """The hold the stage needs before it may advance; None where nothing advances."""
    if state.phase not in ADVANCING or spec.strategy is None:
        return None
    if state.phase == Phase.SHADOW:
        return spec.strategy.shadow.duration if spec.strategy.shadow else None
    if state.phase == Phase.EXPERIMENT:
        return spec.strategy.experiment.duration if spec.strategy.experiment else None
    steps = spec.strategy.steps
    return steps[state.step].hold if state.step < len(steps) else None


def reconcile(spec: RolloutSpec, state: RolloutState, now: float) -> RolloutState:
    """Fit the state to the spec it now runs under (an edit, or a restart with a changed file)."""
    strategy = spec.strategy
    if state.phase == Phase.ROLLED_BACK:
        return state
    if (strategy is None) != (state.phase == Phase.MANUAL):
        return first_stage(spec, state, now, "the spec's strategy changed")
    if strategy is None:
        return state
    experimenting = state.phase in (Phase.EXPERIMENT, Phase.CONCLUDED)
    if (strategy.experiment is not None) != experimenting:
        return first_stage(spec, state, now, "the spec's strategy changed")
    if strategy.experiment is not None:
        experiment = strategy.experiment
        return replace(
            state, weight=_experiment_weight(spec, experiment), shadow_percent=experiment.mirror_percent
        )
    if state.phase == Phase.SHADOW:
        if strategy.shadow is None:
            return first_stage(spec, state, now, "the spec no longer has a shadow stage")
        return replace(state, shadow_percent=strategy.shadow.percent)
    if state.phase == Phase.PROGRESSING:
        if state.step >= len(strategy.steps):
            return first_stage(spec, state, now, "the spec no longer has this step")
        return replace(state, weight=strategy.steps[state.step].weight)
    return replace(state, weight=strategy.steps[-1].weight)
