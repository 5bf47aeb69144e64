"""The rollout's decisions as a story of events, one per change: a step taken, an approval, a
promotion, a rollback, a pause or resume, a change in why the stage holds (a webhook failure
included), an alert. Pure: `storyteller` makes a watcher of the controller's looks (gateway/rollout/facts.py) that
hands each look's before and after states and actions to `Story.tell` and what comes back to a listener
(in Kubernetes mode, Events on the state ConfigMap: gateway/kubernetes/events.py), so `kubectl get
events` tells the story. (Notifications, gateway/notify/, read the same looks for their own audience.)

A hold is told when it changes, not at every look: its typed reason and what it waits on
(`Outcome.identity`: "12s of 600s held" and "13s of 600s held" are one hold), never its words; a look
that does not hold, and a new stage, start the telling afresh. Which Event each reason makes:
gateway/rollout/reasons.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.rollout.facts import Fact, Looked, Watcher
from gateway.rollout.outcome import Identity, Outcome, Reason
from gateway.rollout.reasons import AWAITING_APPROVAL, HOLDS, MOVES, NEWS
from gateway.rollout.rollout_state import Action, Alert, Phase, RecordDecision, RolledBack, RolloutState


@dataclass(frozen=True)
class RolloutEvent:
    """One event: a Kubernetes-style reason (CamelCase), a one-sentence message, and whether it is a
    warning (something went wrong, or a person must act) or normal."""

    reason: str
    message: str
    warning: bool = False


class Story:
    """Turns looks into events, remembering the hold last told."""

    def __init__(self) -> None:
        self._hold: Identity | None = None

    def tell(
        self, before: RolloutState, after: RolloutState, actions: Sequence[Action]
    ) -> list[RolloutEvent]:
        told = _transition(before, after, actions)
        if after.label() != before.label():
            self._hold = None
        for action in actions:
            if isinstance(action, RecordDecision):
                told += self._held(action.outcome)
        if not told:
            told = [RolloutEvent("Alert", f"{a.message}.", True) for a in actions if isinstance(a, Alert)]
        return told

    def _held(self, outcome: Outcome) -> list[RolloutEvent]:
        held = HOLDS.get(outcome.reason)
        if held is None:
            self._hold = None
            news = NEWS.get(outcome.reason)
            return (
                []
                if news is None
                else [_moved(outcome.reason, f"{outcome.why[0].upper()}{outcome.why[1:]}.")]
            )
        event = held.event
        if event is None or outcome.identity() == self._hold:
            return []
        self._hold = outcome.identity()
        joint = ", " if event == AWAITING_APPROVAL else ": "
        return [RolloutEvent(event.reason, f"Holding{joint}{outcome.why}.", event.warning)]


def storyteller(listener: Callable[[RolloutEvent], None]) -> Watcher:
    """A watcher that tells `listener` each look's events (one per change)."""
    story = Story()

    def watch(fact: Fact) -> None:
        if isinstance(fact, Looked):
            for event in story.tell(fact.before, fact.after, fact.actions):
                listener(event)

    return watch


def _transition(before: RolloutState, after: RolloutState, actions: Sequence[Action]) -> list[RolloutEvent]:
    """The event for a move to another stage (or a pause, a resume), if the look made one."""
    if any(isinstance(a, RolledBack) for a in actions):
        return [_moved(Reason.ROLLED_BACK, f"Weight 0%, {after.reason}.")]
    if after.label() == before.label():
        return []
    weight = f"weight {after.weight}%"
    if after.phase == Phase.PROMOTED:
        return [_moved(Reason.PROMOTED, f"Promoted at {weight}: {after.reason}.")]
    if after.paused and not before.paused and after.phase == before.phase and after.step == before.step:
        return [
            RolloutEvent("Paused", f"Paused at {weight}: {after.reason}.", after.reason != "operator pause")
        ]
    if before.paused and not after.paused and after.phase == before.phase and after.step == before.step:
        return [RolloutEvent("Resumed", f"Resumed at {weight}: {after.reason}.")]
    if after.reason == "operator approve":
        return [RolloutEvent("Approved", f"Step {after.step} approved by an operator and taken: {weight}.")]
    if after.phase == Phase.PROGRESSING and (before.phase == Phase.SHADOW or after.step > before.step):
        return [_moved(Reason.STEPPED, f"Step {after.step} taken, {weight}: {after.reason}.")]
    return [RolloutEvent("StageChanged", f"Now at {after.label()}, {weight}: {after.reason}.")]


def _moved(reason: Reason, message: str) -> RolloutEvent:
    event = (MOVES.get(reason) or NEWS[reason]).event
    return RolloutEvent(event.reason, message, event.warning)
