"""The rollout's notifications, derived from what the controller tells (gateway/rollout/facts.py). Pure.

One event per thing that happened, with a sentence a person can act on and the structured fields a
program reads. Which decision makes which event: gateway/rollout/reasons.py, keyed on the decision's
typed reason, never its words. Deduplicated by `Memory`: a stage that holds for the same reason at every
look is told once, and again only when the hold changes (`Outcome.identity`: metrics error 1 of 3 and 2
of 3 are one hold), after a look that did not hold, or when a new stage begins; the inconclusive alarm
fires once per stage. The memory lives in the gateway process: a restarted gateway may tell a standing
hold once more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gateway.rollout.analysis import Check, Verdict
from gateway.rollout.facts import Fact, Looked, RollbackAcked, RollbackConfirmedLate
from gateway.rollout.outcome import Identity, Outcome, Reason
from gateway.rollout.plan import roles
from gateway.rollout.reasons import CAPACITY_NOT_READY, HOLDS, MOVES, NEWS, SPLIT_NOT_SERVED
from gateway.rollout.rollout_state import ADVANCING, Phase, RecordDecision, RolloutState
from gateway.rollout.views import evidence_status, stage_of
from gateway.spec.model import RolloutSpec, SpecError

STATUS_HINT = "`graystack status` shows the evidence"


@dataclass(frozen=True)
class Event:
    kind: str  # one of gateway.spec.notifications.EVENTS
    rollout: str
    at: float
    text: str  # one sentence: what happened, why, and what to do
    fields: Mapping[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The structured event, as a json receiver gets it."""
        return {"event": self.kind, "rollout": self.rollout, "at": self.at, "text": self.text, **self.fields}


@dataclass(frozen=True)
class Memory:
    """What was told in the current stage, so a repeated reason is not told again."""

    stage: str | None = None
    hold: Identity | None = None  # the last hold told
    inconclusive_since: float | None = None
    inconclusive_told: bool = False


def derive(fact: Fact, memory: Memory, inconclusive_after: float) -> tuple[list[Event], Memory]:
    """The events `fact` makes, and the memory after them."""
    if isinstance(fact, Looked):
        return _looked(fact, memory, inconclusive_after)
    if isinstance(fact, RollbackAcked):
        return [_acked(fact)], memory
    return [_late(fact)], memory


def spec_refused(rollout: str, message: str, now: float) -> Event:
    text = (
        f"{rollout}: a spec change was refused and the last good spec stays live: {message}; "
        "fix the spec and save it again."
    )
    return Event("spec_refused", rollout, now, text, {"message": message})


def _looked(fact: Looked, memory: Memory, inconclusive_after: float) -> tuple[list[Event], Memory]:
    before, after, spec, now = fact.before, fact.after, fact.spec, fact.now
    if stage_of(after) != memory.stage:
        memory = Memory(stage=stage_of(after))
    events = []
    if after.phase == Phase.ROLLED_BACK and before.phase != Phase.ROLLED_BACK:
        failing = [c for c in fact.decision.checks if c.verdict == Verdict.FAIL] if fact.decision else []
        events.append(_rolled_back(spec, after, failing, now))
    elif after.phase == Phase.PROMOTED and before.phase != Phase.PROMOTED:
        promoted = MOVES[Reason.PROMOTED].notice
        events.append(_event(promoted, spec, after, now, f"promoted: {after.reason}", "nothing to do."))
    elif stage_of(after) != stage_of(before) and after.phase in ADVANCING:
        text = f"moved from {before.label()} to {after.label()}: {after.reason}"
        stepped = MOVES[Reason.STEPPED].notice
        events.append(_event(stepped, spec, after, now, text, f"{STATUS_HINT}.", {"from": before.label()}))
    if after.paused and not before.paused:
        what = f"paused: {after.reason}"
        events.append(_event("paused", spec, after, now, what, "`graystack resume` continues it."))
    if fact.decision is not None and (news := NEWS.get(fact.decision.outcome.reason)) is not None:
        going = news.then if not after.paused else "it stays paused by its operator: `graystack resume`"
        what = fact.decision.outcome.why
        events.append(_event(news.notice, spec, after, now, what, f"{going}.", {"decision": what}))
    if fact.decision is not None:
        held, memory = _holding(spec, after, fact.decision.outcome, fact.decision.checks, memory, now)
        events += held
        late, memory = _inconclusive(spec, after, fact.decision, memory, now, inconclusive_after)
        events += late
    return events, memory


def _holding(
    spec: RolloutSpec,
    state: RolloutState,
    outcome: Outcome,
    checks: tuple[Check, ...],
    memory: Memory,
    now: float,
) -> tuple[list[Event], Memory]:
    """A hold for a reason a person may act on (not its hold time, a pause or a command), once per hold."""
    held = HOLDS.get(outcome.reason)
    if held is None:
        return [], replace(memory, hold=None)
    kind = held.notice
    if kind is None or outcome.identity() == memory.hold:
        return [], memory
    memory = replace(memory, hold=outcome.identity())
    fields = {"hold_reason": outcome.why, **_evidence(spec, state, checks)}
    if kind == CAPACITY_NOT_READY:
        text = f"the stage waits for the candidate's pods: {outcome.why}"
        return [_event(kind, spec, state, now, text, "check its pods.", fields)], memory
    if kind == SPLIT_NOT_SERVED:
        text = f"the stage holds: {outcome.why}"
        hint = "check the gateway's routes and endpoints (graystack status shows the counts)."
        return [_event(kind, spec, state, now, text, hint, fields)], memory
    needed = fields["requests_still_needed"]
    more = f" ({needed} more candidate requests needed)" if needed else ""
    text = f"the stage is holding: {outcome.why}{more}"
    return [_event(kind, spec, state, now, text, f"{STATUS_HINT}.", fields)], memory


def _inconclusive(
    spec: RolloutSpec,
    state: RolloutState,
    decision: RecordDecision,
    memory: Memory,
    now: float,
    after: float,
) -> tuple[list[Event], Memory]:
    if decision.outcome.reason != Reason.INCONCLUSIVE:
        return [], replace(memory, inconclusive_since=None)
    since = memory.inconclusive_since if memory.inconclusive_since is not None else now
    memory = replace(memory, inconclusive_since=since)
    if memory.inconclusive_told or now - since < after:
        return [], memory
    waiting = [c.name for c in decision.checks if c.verdict != Verdict.PASS]
    text = (
        f"the stage has been inconclusive for {(now - since) / 60:.0f} min (waiting on {', '.join(waiting)})"
    )
    action = "send it more traffic, or decide with `graystack promote` or `graystack rollback`."
    fields = {"inconclusive_seconds": round(now - since, 3), **_evidence(spec, state, decision.checks)}
    event = _event("inconclusive_too_long", spec, state, now, text, action, fields)
    return [event], replace(memory, inconclusive_told=True)


def _rolled_back(spec: RolloutSpec, state: RolloutState, failing: list[Check], now: float) -> Event:
    fields = {"failing_checks": [_check(c) for c in failing]} if failing else {}
    text = f"rolled back to the baseline: {state.reason.removeprefix('rolled back: ')}"
    action = "fix the candidate, then `graystack retry`."
    return _event(MOVES[Reason.ROLLED_BACK].notice, spec, state, now, text, action, fields)


def _acked(fact: RollbackAcked) -> Event:
    text = f"the rollback is live on every connected proxy, {fact.seconds:.3f}s after it started"
    if fact.pending:
        action = (
            f"still pending on {', '.join(fact.pending)}, cut off from the control plane and on the old "
            "split until they reconnect: check their network."
        )
    else:
        action = "nothing is pending."
    fields = {"ack_seconds": round(fact.seconds, 4), "pending_proxies": list(fact.pending)}
    return _event("rollback_acked", fact.spec, fact.state, fact.now, text, action, fields)


def _late(fact: RollbackConfirmedLate) -> Event:
    text = (
        f"{fact.spec.name}: the proxies cut off during the rollback ({', '.join(fact.proxies)}) are back and "
        "ACKed it, or were forgotten: the rollback is live everywhere; nothing to do."
    )
    return Event("rollback_confirmed_late", fact.spec.name, fact.now, text, {"proxies": list(fact.proxies)})


def _event(
    kind: str,
    spec: RolloutSpec,
    state: RolloutState,
    now: float,
    what: str,
    action: str,
    extra: Mapping[str, Any] | None = None,
) -> Event:
    """`<rollout>: <what> (<candidate> at <stage>, <weight> %); <action>` with the state's fields."""
    try:
        baseline, candidate = roles(spec)
    except SpecError:
        baseline = candidate = ""
    weight = "" if state.weight is None else f", {state.weight} % of traffic"
    text = f"{spec.name}: {what} ({candidate} at {state.label()}{weight}); {action}"
    fields = {
        "baseline": baseline,
        "candidate": candidate,
        "phase": state.phase.value,
        "stage": state.label(),
        "step": state.step,
        "weight": state.weight,
        "reason": state.reason,
        **(extra or {}),
    }
    return Event(kind, spec.name, now, text, fields)


def _evidence(spec: RolloutSpec, state: RolloutState, checks: tuple[Check, ...]) -> dict[str, Any]:
    """Each check's evidence (log e-value against its bound, samples), and the stage's requests."""
    evidence = evidence_status(spec, state, None)
    requests = evidence.stage_requests if evidence else 0
    needed = evidence.stage_requests_needed if evidence else None
    return {
        "checks": [_check(c) for c in checks],
        "stage_requests": requests,
        "stage_requests_needed": needed,
        "requests_still_needed": max(0, needed - requests) if needed is not None else 0,
    }


def _check(check: Check) -> dict[str, Any]:
    """A check as JSON has it: no infinities (a log statistic before any data is -inf)."""
    finite = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in asdict(check).items()
    }
    return {**finite, "verdict": check.verdict.value}
