"""The rollout state machine: a pure function of (spec, state, checks, command, now) -> (state, actions).

No I/O and no clock of its own: the controller measures, pushes xDS, persists and waits for ACKs, and
hands the time in. Everything that must survive a restart (the step, the weights, the hold accrued so
far) lives in `RolloutState`, which round-trips through plain JSON.

Phases: `shadow` (weight 0, Envoy mirrors `shadow.percent` of the traffic), `progressing` (the weight of
`strategy.steps[step]`), `promoted` (after the last step), `rolled_back` (weight 0, shadow off) and
`manual` (no `strategy`: the split is the spec's own); with `strategy: experiment`, `experiment` (its fixed
split, its duration accrued as a hold) then `concluded` (the split stays, the guard runs). `paused` is a
flag on shadow/progressing/experiment.

One call handles, in order:
1. The guard. Any FAIL check, in any phase but rolled_back (promoted and manual included: the guard
   stays on after 100 %), rolls back at once; the reason names each failing check with its value,
   samples, bound and threshold (and its evidence). A command in the same call is ignored: safety
   first. The one exception: when every failing check is a shared incident (the check tells it: for
   errors, by comparison, checks/errors.py) and `analysis.on_shared_incident` is `hold`, the weights stay,
   the rollout pauses and one alert pages, and the tests on each variant's own traffic start anew (the
   incident's errors are in them; the comparisons go on). The incident is watched (gateway/rollout/incident.py): once the new tests
   stay quiet for `analysis.incident_clear` (no check failing or in error, the error tests passing) it
   is over, and the rollout goes on by itself (`shared_incident_cleared`; the stage's hold time runs on
   from where it stopped). Only the pause the incident made is lifted so: an operator's own, made before
   or during it, stays theirs. New tests that fire shared again keep it held and restart the quiet
   period, never a rollback; an operator's resume ends the hold at once. A failure that is the
   candidate's alone still rolls back.
   Every rollback yields `RolledBack` with the label it is counted under (graystack_rollout_rollbacks_total):
   the first failing check's name, `shared_incident` (every failing check shared), `operator` (the
   command), `metrics_error` (on_error: rollback) or `webhook` (a step webhook's on_failure: rollback).
2. The command. pause / resume (timers freeze and continue; weights stay), promote (skip the rest of
   this stage: shadow -> step 0, step i -> i+1, last step -> promoted), rollback (an operator abort,
   handled like a FAIL), retry (rolled_back -> the first stage, fresh timers), approve (the step
   awaiting its manual gate is taken). A command that makes no sense in the phase changes nothing
   and yields `Ignored` with the reason; nothing here raises.
   promote keeps the paused flag: the operator moved one stage, they did not lift their pause.
3. The verdicts. ERROR in any check: one more consecutive error interval; below `ERROR_LIMIT` hold; at
   the limit apply `analysis.on_error` once (freeze: pause with an Alert, or an Alert alone where
   nothing advances; rollback: roll back). A frozen rollout stays paused until an operator resumes it
   (which also resets the count): a rollout that alerted should not move again unseen. Any interval
   without an ERROR resets the count. INCONCLUSIVE holds: it is never a pass.
4. Advancing, only when no command was applied in this call and not paused: the hold (shadow
   `duration` or step `hold`) has elapsed AND this interval's checks are all PASS (an empty list is not
   a pass). error_rate passes only once the stage has seen enough candidate requests to catch the
   spec's smallest regression: until then the stage extends past its hold. weight_status must pass too: an unverified checkpoint is exactly what we must not ship, so a
   rollout whose probes never report holds. Shadow also needs the gate: success (1 - error_rate value)
   >= gate.success_rate and latency_ratio value <= gate.max_latency_ratio; a gate miss holds (it is
   not a failure: the variant may just not be fast enough yet). At most one stage per call.
   Where the controller scales the variants (gateway/rollout/capacity.py), the candidate's pods for
   the next weight must be ready too (`CapacityGate`): until then the stage holds, from the first such
   look (`capacity_since`); past the gate's timeout it freezes as on_error does (an Alert and a pause),
   never advancing onto pods it does not have. A rollback is never gated; an operator promote is not
   either (the operator's override). Last, the next step's own gates (gateway/rollout/gates.py): its
   webhooks' answer, then its manual approval (`approve` takes the step; promote passes them).
   Where the rollout drives the user's Gateway API gateway (issue 36), the split written must be proven
   served (`SplitGate`: Accepted by its Gateways, then the answers' own split) before a stage advances:
   a data plane shown to serve another split holds at once (even within the hold time), one not yet
   proven holds where the capacity gate would. Neither is a failure: the candidate is not at fault.
   An experiment never advances: it concludes once its duration has elapsed or, with `end_on_decision`,
   once its check passes (every difference decided, gateway/rollout/checks/experiment.py); promote
   concludes it at once. Concluded, it never promotes by itself: the operator rolls back or edits the spec.

Time: the hold is accrued, not recomputed from a start time. Each call folds `now - held_until` into
`held` (never negative), so a clock that jumps backwards loses nothing and restarts nothing, a clock
that jumps forwards may complete a hold but never skips a stage, a pause stops accrual, and a state
reloaded after a restart continues its hold (the downtime counts: the traffic kept flowing).

The split is part of the state (`weight`, `shadow_percent`), not an action: the controller derives
the split it wants from the state after every call and pushes it when it differs from the live one, so
a push that was refused is retried at the next interval.

Rollback is an ordered sequence of which the machine owns the first part: it sets weight 0 and shadow
off, and records `rollback_started` (the first failing sample, or the operator's command). The
controller pushes that, waits until every connected Envoy ACKed, then calls `rollback_acked` (which
returns graystack_rollback_seconds) or, past its deadline, alerts (gateway/rollout/fleet.py). The
controller also sends every header segment to the baseline while rolled back: the state's weight sets
the default split only.

Every call with checks records its decision (`RecordDecision`) with a typed outcome
(gateway/rollout/outcome.py): its reason and evidence, from which the sentence people read is written;
the Kubernetes Events and the notifications key on the reason (gateway/rollout/reasons.py).

The sequential tests' state (`evidence`, gateway/rollout/evidence.py) rides in the state, so it is
saved and restored with it; each look (gateway/rollout/look.py) adds to it, and the machine only
keeps it or, on `retry` and on an operator's resuming a held shared incident, drops it so that new tests
start. Holding one asks the look to start its tests on each variant's own traffic anew (incident.py).

A spec edited under a running rollout (or between restarts) is reconciled first: a stage that no longer
exists restarts the strategy from its first stage; a changed weight or shadow percent is applied. Entering a
stage, and reconciling, are gateway/rollout/stages.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.rollout import gates, incident
from gateway.rollout.analysis import Check, Verdict
from gateway.rollout.checks.experiment import EXPERIMENT
from gateway.rollout.outcome import Outcome, Reason
from gateway.rollout.rollout_state import (
    ADVANCING,
    Action,
    Alert,
    CapacityGate,
    Command,
    Ignored,
    Phase,
    RecordDecision,
    RolledBack,
    RolloutState,
    SplitGate,
    WebhookOutcome,
)
from gateway.rollout.stages import (
    advance,
    enter,
    first_stage,
    fold,
    hold_needed,
    moved,
    pause,
    reconcile,
    strategy_of,
)
from gateway.rollout.verdicts import describe, summary
from gateway.spec.model import RolloutSpec

ERROR_LIMIT = 3  # consecutive error intervals before on_error applies (Argo aborts after 5; we freeze)


def initial_state(spec: RolloutSpec, now: float) -> RolloutState:
    """Where a new rollout starts: shadow, else step 0, else manual."""
    state = first_stage(spec, RolloutState(Phase.MANUAL, weight=None), now, "rollout started")
    return replace(state, history=())


def step(
    spec: RolloutSpec,
    state: RolloutState,
    checks: Sequence[Check] | None,
    command: Command | None,
    now: float,
    capacity: CapacityGate | None = None,
    webhook: WebhookOutcome | None = None,
    split: SplitGate | None = None,
) -> tuple[RolloutState, list[Action]]:
    """The next state and the actions for the controller; see the module docstring for the rules.
    `capacity` None: nothing scales the variants, so nothing waits for them. `webhook`: the answer of
    the webhooks a `CallWebhooks` asked for (gateway/rollout/gates.py). `split` None: graystack's own
    Envoy serves the split (its proxies' ACKs are the proof)."""
    actions: list[Action] = []
    state = gates.record(reconcile(spec, fold(state, now), now), webhook)
    outcome: Outcome | None = None  # None: no checks this call, so no decision to record
    failing = [c for c in checks or () if c.verdict == Verdict.FAIL]
    held = incident.shared_hold(spec, failing)
    if failing and state.phase != Phase.ROLLED_BACK and not held:
        label = "shared_incident" if all(c.shared for c in failing) else failing[0].name
        state = _roll_back(state, now, "; ".join(describe(c) for c in failing), label, actions)
        outcome = Outcome(Reason.ROLLED_BACK)
        if command is not None:
            actions.append(Ignored(command, "a failing check rolled the rollout back"))
    elif held and state.phase != Phase.ROLLED_BACK:
        state, outcome = incident.hold(spec, state, failing, now, actions)
        if command is not None:
            state, _ = _command(spec, state, command, now, actions)
    else:
        applied = False
        if command is not None:
            state, applied = _command(spec, state, command, now, actions)
        if checks is not None and state.incident is not None and state.phase != Phase.ROLLED_BACK:
            state, outcome = incident.watch(spec, state, checks, now)
        if checks is not None and outcome is None:
            state, outcome = _judge(spec, state, tuple(checks), now, actions, not applied, capacity, split)
    if outcome is not None:
        actions.insert(0, RecordDecision(tuple(checks or ()), outcome))
    return state, actions


def rollback_acked(state: RolloutState, now: float) -> tuple[RolloutState, float | None]:
    """Every connected Envoy ACKed the rollback: it is done. Returns graystack_rollback_seconds, from
    the first failing sample to this last ACK (None when no rollback was in flight)."""
    if state.rollback_started is None:
        return state, None
    seconds = max(0.0, now - state.rollback_started)
    return replace(state, rollback_started=None), seconds


def _roll_back(
    state: RolloutState, now: float, cause: str, label: str, actions: list[Action]
) -> RolloutState:
    """Weight 0, shadow off, the rollback in flight; `label` is the rollbacks counter's reason."""
    reason = f"rolled back: {cause}"
    actions.extend((Alert(reason), RolledBack(label)))
    state = enter(state, now, reason, Phase.ROLLED_BACK, state.step, 0, 0)
    return replace(state, errors=0, rollback_started=now)


def _command(
    spec: RolloutSpec, state: RolloutState, command: Command, now: float, actions: list[Action]
) -> tuple[RolloutState, bool]:
    """Apply an operator command; (state, False) with an Ignored action where it makes no sense."""
    phase = state.phase
    problem = None
    if command in (Command.PAUSE, Command.PROMOTE) and phase not in ADVANCING:
        problem = f"nothing advances in phase {phase.value}"
    elif command == Command.PAUSE and state.paused and not incident.paused_it(state):
        problem = "already paused"
    elif command == Command.RESUME and not state.paused:
        problem = "not paused"
    elif command == Command.ROLLBACK and phase == Phase.ROLLED_BACK:
        problem = "already rolled back"
    elif command == Command.RETRY and phase != Phase.ROLLED_BACK:
        problem = f"only a rolled-back rollout can be retried (phase {phase.value})"
    elif command == Command.APPROVE:
        problem = gates.approval_problem(state)
    if problem is not None:
        actions.append(Ignored(command, problem))
        return state, False
    if command == Command.PAUSE:
        return incident.take_pause(pause(state, now, "operator pause")), True
    if command == Command.RESUME:
        fresh = incident.forget(state) if state.incident is not None else state
        resumed = {"paused": False, "held_until": now, "errors": 0, "capacity_since": None}
        return moved(fresh, now, "operator resume", **resumed), True
    if command == Command.PROMOTE:
        return advance(spec, state, now, "operator promote"), True
    if command == Command.ROLLBACK:
        return _roll_back(state, now, "operator rollback", "operator", actions), True
    if command == Command.APPROVE:
        return advance(spec, state, now, "operator approve"), True
    return first_stage(spec, incident.forget(state), now, "operator retry"), True


def _judge(
    spec: RolloutSpec,
    state: RolloutState,
    checks: tuple[Check, ...],
    now: float,
    actions: list[Action],
    may_advance: bool,
    capacity: CapacityGate | None,
    split: SplitGate | None,
) -> tuple[RolloutState, Outcome]:
    """Apply one interval's (non-failing) verdicts; returns the state and the decision's outcome."""
    if state.phase == Phase.ROLLED_BACK:
        return state, Outcome(Reason.RECORDED_ONLY)
    errored = [c for c in checks if c.verdict == Verdict.ERROR]
    state = replace(state, awaiting=None)  # a gate awaits approval only while this look reaches it
    if errored:
        return _on_error(spec, replace(state, errors=state.errors + 1), errored[0], now, actions)
    state = replace(state, errors=0)
    if state.phase not in ADVANCING:
        return state, Outcome(Reason.GUARD_ONLY)
    if state.paused or not may_advance:
        return state, Outcome(Reason.PAUSED if state.paused else Reason.COMMAND_MOVED)
    if split is not None and split.refuted:
        return state, _split_hold(split)
    if state.phase == Phase.EXPERIMENT:
        return _experiment(spec, state, checks, now)
    needed = hold_needed(spec, state)
    if needed is not None and state.held < needed:
        return state, Outcome(Reason.HOLD_TIME, seconds=state.held, limit=needed)
    waiting = [c.name for c in checks if c.verdict != Verdict.PASS]
    if not checks or waiting:
        return state, Outcome(Reason.INCONCLUSIVE, checks=tuple(waiting))
    if state.phase == Phase.SHADOW:
        shadow = strategy_of(spec).shadow
        missed = gates.shadow_gate_missed(shadow.gate, checks) if shadow is not None else None
        if missed is not None:
            return state, missed
    if split is not None and not split.proven:
        return state, _split_hold(split)
    if capacity is not None and not capacity.ready:
        return _wait_for_capacity(state, capacity, now, actions)
    state, shut = gates.step_gate(spec, state, now, actions)
    if shut is not None and shut.rollback is not None:
        return _roll_back(state, now, shut.rollback, "webhook", actions), shut.outcome
    if shut is not None:
        return state, shut.outcome
    state = advance(spec, state, now, f"checks passed after {state.held:.0f}s: {summary(checks)}")
    promoted = state.phase == Phase.PROMOTED
    return state, Outcome(Reason.PROMOTED) if promoted else Outcome(Reason.STEPPED, step=state.step)


def _experiment(
    spec: RolloutSpec, state: RolloutState, checks: tuple[Check, ...], now: float
) -> tuple[RolloutState, Outcome]:
    """Hold the experiment's split until its duration has elapsed or (end_on_decision) its check passes."""
    experiment = strategy_of(spec).experiment
    duration = experiment.duration if experiment is not None else 0.0
    decided = experiment is not None and experiment.end_on_decision
    decided = decided and any(c.name == EXPERIMENT and c.verdict == Verdict.PASS for c in checks)
    if state.held < duration and not decided:
        return state, Outcome(Reason.EXPERIMENT_RUNNING, seconds=state.held, limit=duration)
    why = "every difference decided" if decided else f"its duration ({duration:.0f}s) elapsed"
    return advance(spec, state, now, why), Outcome(Reason.EXPERIMENT_CONCLUDED, cause=why)


def _on_error(
    spec: RolloutSpec, state: RolloutState, check: Check, now: float, actions: list[Action]
) -> tuple[RolloutState, Outcome]:
    if state.errors != ERROR_LIMIT:
        escalated = Reason.METRICS_ERROR_ESCALATED if state.errors > ERROR_LIMIT else Reason.METRICS_ERROR
        return state, Outcome(escalated, count=state.errors, limit=ERROR_LIMIT, cause=check.reason)
    cause = f"metrics unavailable for {ERROR_LIMIT} intervals ({check.reason})"
    if spec.analysis.on_error == "rollback":
        return _roll_back(state, now, cause, "metrics_error", actions), Outcome(Reason.ROLLED_BACK)
    actions.append(Alert(f"{cause}; weights frozen at {state.weight}%"))
    if state.phase in ADVANCING and not state.paused:
        state = pause(state, now, f"frozen: {cause}")
    return incident.take_pause(state), Outcome(Reason.FROZEN)  # frozen during a hold: not lifted with it


def _wait_for_capacity(
    state: RolloutState, gate: CapacityGate, now: float, actions: list[Action]
) -> tuple[RolloutState, Outcome]:
    """Hold for the candidate's pods; past the gate's timeout, freeze with an alert (once: paused)."""
    since = now if state.capacity_since is None else state.capacity_since
    state = replace(state, capacity_since=since)
    if now - since < gate.timeout:
        return state, Outcome(Reason.CAPACITY, seconds=now - since, limit=gate.timeout, cause=gate.reason)
    cause = f"capacity not ready after {now - since:.0f}s: {gate.reason}"
    actions.append(Alert(f"{cause}; weights frozen at {state.weight}%"))
    return pause(state, now, f"frozen: {cause}"), Outcome(Reason.FROZEN_CAPACITY)


def _split_hold(split: SplitGate) -> Outcome:
    """A hold on the user's gateway, naming the proof that does not hold (its identity: a new proof
    failing is a new hold, told again)."""
    reason = Reason.SPLIT_REFUTED if split.refuted else Reason.SPLIT_UNPROVEN
    return Outcome(reason, checks=(split.waiting_on or "",), cause=split.reason)
