"""One typed outcome (gateway/rollout/outcome.py, reasons.py): every reason has a row, the names users see
are pinned, and rewording every decision's sentence changes no Kubernetes Event and no notification."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gateway.notify.events import Memory, derive
from gateway.rollout.facts import Looked
from gateway.rollout.outcome import SENTENCES, Outcome, Reason
from gateway.rollout.reasons import HOLDS, MOVES, NEWS, UNTOLD
from gateway.rollout.rollout_state import Action, Command, Phase, RecordDecision, RolloutState
from gateway.rollout.story import Story
from gateway.spec.model import RolloutSpec
from gateway.spec.notifications import EVENTS
from tests.unit.test_rollout_machine import ERROR, INCONCLUSIVE, SPEC, Run, failing, interval

# What users see for each reason: (Event reason, warning) and notification kind; None: not told there.
TABLE: dict[Reason, tuple[tuple[str, bool] | None, str | None]] = {
    Reason.STEPPED: (("StepTaken", False), "step_taken"),
    Reason.PROMOTED: (("Promoted", False), "promoted"),
    Reason.ROLLED_BACK: (("RolledBack", True), "rolled_back"),
    Reason.FROZEN: (None, None),
    Reason.FROZEN_CAPACITY: (None, "capacity_not_ready"),
    Reason.GUARD_ONLY: (None, None),
    Reason.RECORDED_ONLY: (None, None),
    Reason.PAUSED: (None, None),
    Reason.COMMAND_MOVED: (("Holding", False), None),
    Reason.HOLD_TIME: (("Holding", False), None),
    Reason.INCONCLUSIVE: (("Holding", False), "stage_holding"),
    Reason.SHADOW_GATE: (("Holding", False), "stage_holding"),
    Reason.CAPACITY: (("Holding", False), "capacity_not_ready"),
    Reason.SPLIT_UNPROVEN: (("Holding", False), None),
    Reason.SPLIT_REFUTED: (("SplitNotServed", True), "split_not_served"),
    Reason.METRICS_ERROR: (("Holding", False), "stage_holding"),
    Reason.METRICS_ERROR_ESCALATED: (("Holding", False), "stage_holding"),
    Reason.SHARED_INCIDENT: (("Holding", False), "stage_holding"),
    Reason.SHARED_INCIDENT_STANDING: (("Holding", False), "stage_holding"),
    Reason.SHARED_INCIDENT_CLEARING: (None, None),
    Reason.SHARED_INCIDENT_CLEARED: (("IncidentCleared", False), "incident_cleared"),
    Reason.CALLING_WEBHOOKS: (("Holding", False), "stage_holding"),
    Reason.WEBHOOK_FAILED: (("WebhookFailed", True), "stage_holding"),
    Reason.AWAITING_APPROVAL: (("AwaitingApproval", True), "stage_holding"),
    Reason.EVIDENCE_GATE: (("AwaitingApproval", True), "stage_holding"),
    Reason.EXPERIMENT_RUNNING: (("Holding", False), None),
    Reason.EXPERIMENT_CONCLUDED: (("ExperimentConcluded", False), "experiment_concluded"),
}

STEP_0 = RolloutState(Phase.PROGRESSING, step=0, weight=5)
Look = tuple[RolloutState, RolloutState, tuple[Action, ...], float]


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_has_one_row_a_sentence_and_the_names_users_see(reason: Reason):
    assert [reason in MOVES, reason in NEWS, reason in HOLDS, reason in UNTOLD].count(True) == 1
    assert reason in SENTENCES
    if reason in MOVES or reason in NEWS:
        moved = MOVES.get(reason) or NEWS[reason]
        told = (moved.event.reason, moved.event.warning), moved.notice
    elif reason in HOLDS:
        held = HOLDS[reason]
        told = (held.event.reason, held.event.warning) if held.event else None, held.notice
    else:
        told = None, None
    assert told == TABLE[reason]
    assert told[1] is None or told[1] in EVENTS


def test_the_table_covers_every_reason():
    assert set(TABLE) == set(Reason) == set(MOVES) | set(NEWS) | set(HOLDS) | UNTOLD


def every_hold_twice() -> list[Look]:
    """Each hold at two looks with other numbers and words: each one hold, told once."""
    looks = []
    for i, reason in enumerate(itertools.chain.from_iterable((r, r) for r in HOLDS)):
        numbers = {"seconds": float(i), "limit": 600.0, "count": i, "cause": f"cause {i}"}
        outcome = Outcome(reason, step=1, weight=20, checks=("error_rate",), **numbers)
        looks.append((STEP_0, STEP_0, (RecordDecision(tuple(interval()), outcome),), 1000.0 + i))
    return looks


def machine_run() -> list[Look]:
    """The machine's own decisions over a rollout: holds, a freeze, moves, commands, a rollback."""
    run, looks = Run(SPEC), []

    def look(seconds: float, checks: list | None, command: Command | None = None) -> None:
        run.after(seconds, checks, command)
        looks.append((run.before, run.state, tuple(run.actions), run.now))

    unsuccessful = [replace(c, value=0.01) if c.name == "error_rate" else c for c in interval()]
    slow = [replace(c, value=0.9) if c.name == "ttft_vs_baseline" else c for c in interval()]
    for seconds, checks, command in [
        (5, interval(), None),  # the shadow's hold time, twice
        (5, interval(), None),
        (300, unsuccessful, None),  # the shadow gate: success rate, twice, then latency
        (5, unsuccessful, None),
        (5, slow, None),
        (5, interval(error_rate=INCONCLUSIVE), None),
        (5, interval(error_rate=INCONCLUSIVE), None),
        (5, interval(), None),  # step 0
        *[(5, interval(error_rate=ERROR), None)] * 4,  # errors 1, 2, the freeze, escalated
        (5, None, Command.RESUME),
        (600, interval(), None),  # step 1
        (5, interval(), Command.PAUSE),
        (5, interval(), Command.RESUME),  # a command's look
        (5, failing(), None),
        (5, interval(), None),  # recorded only
    ]:
        look(seconds, checks, command)
    return looks


def told(looks: list[Look], spec: RolloutSpec = SPEC) -> tuple[list[tuple[str, bool]], list[str]]:
    """The Kubernetes Events (reason, warning) and the notification kinds the looks make under `spec`."""
    story, memory, events, kinds = Story(), Memory(), [], []
    for before, after, actions, now in looks:
        events += [(event.reason, event.warning) for event in story.tell(before, after, actions)]
        decision = next((a for a in actions if isinstance(a, RecordDecision)), None)
        made, memory = derive(Looked(spec, before, after, decision, now, actions), memory, 1e9)
        kinds += [event.kind for event in made]
    return events, kinds


def reworded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sentence rewritten: no verb, and words that differ at every look (nothing to mask)."""
    words: Iterator[int] = itertools.count()
    for reason in Reason:
        monkeypatch.setitem(SENTENCES, reason, ("", "reworded"))
    monkeypatch.setattr(Outcome, "why", property(lambda _: f"said otherwise, take {next(words)}"))


@pytest.mark.parametrize("run", [every_hold_twice, machine_run])
def test_rewording_every_sentence_changes_no_event_and_no_notification(monkeypatch, run):
    plain = told(run())
    reworded(monkeypatch)
    looks = run()
    sentences = [
        a.outcome.sentence for _, _, actions, _ in looks for a in actions if isinstance(a, RecordDecision)
    ]
    assert sentences
    assert all(s.startswith("said otherwise") for s in sentences)
    assert told(looks) == plain


def test_each_hold_is_told_once_under_its_rows_names():
    events, kinds = told(every_hold_twice())
    assert events == [TABLE[r][0] for r in HOLDS if TABLE[r][0] is not None]
    assert kinds == [TABLE[r][1] for r in HOLDS if TABLE[r][1] is not None]


def test_the_machines_decisions_are_told_under_todays_names():
    """As before the typed outcome, but for the shadow gate's second miss (another check: another hold)."""
    events, kinds = told(machine_run())
    holding, warned = ("Holding", False), ("Paused", True)
    assert events == [
        holding,  # the shadow's hold time
        holding,  # the shadow gate on the success rate ...
        holding,  # ... and on the latency ratio: another hold
        holding,  # inconclusive
        ("StepTaken", False),
        holding,  # metrics error 1 (and 2)
        warned,  # the freeze
        holding,  # escalated
        ("Resumed", False),
        ("StepTaken", False),  # step 0's hold accrued before the freeze and after the resume
        ("Paused", False),
        ("Resumed", False),
        holding,  # the resume's look
        ("RolledBack", True),
    ]
    assert kinds == [
        "stage_holding",  # the shadow gate, twice
        "stage_holding",
        "stage_holding",  # inconclusive
        "step_taken",
        "stage_holding",  # metrics error
        "paused",
        "stage_holding",  # escalated
        "step_taken",
        "paused",
        "rolled_back",
    ]
