"""The notifications' pure half: which events a look makes, told once per reason, and their bytes."""

from __future__ import annotations

import json

from gateway.notify import messages
from gateway.notify.events import Event, Memory, derive
from gateway.rollout.analysis import Check, Verdict
from gateway.rollout.facts import Looked
from gateway.rollout.outcome import Outcome, Reason
from gateway.rollout.rollout_state import Phase, RecordDecision, RolloutState
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
from tests.unit.test_spec import DESIGN_EXAMPLE

SPEC = validate_spec(load_yaml(DESIGN_EXAMPLE))
STEP_0 = RolloutState(Phase.PROGRESSING, step=0, weight=5)
STEP_1 = RolloutState(Phase.PROGRESSING, step=1, weight=20)
WAITING = (Check("error_rate", Verdict.INCONCLUSIVE, None, 12, None, 0.003, "too few", float("-inf"), 5.99),)
INCONCLUSIVE = Outcome(Reason.INCONCLUSIVE, checks=("error_rate",))


def metrics_error(count: int) -> Outcome:
    return Outcome(Reason.METRICS_ERROR, count=count, limit=3, cause="scrape failed")


def capacity(seconds: float) -> Outcome:
    return Outcome(Reason.CAPACITY, seconds=seconds, limit=600, cause="1 of 2 zero-layer pods ready")


def told(outcomes: list[Outcome], state: RolloutState = STEP_0, memory: Memory | None = None) -> list[str]:
    """The event kinds of one look per outcome, in the same stage, starting from `memory`."""
    memory = memory or Memory()
    kinds = []
    for i, outcome in enumerate(outcomes):
        fact = Looked(SPEC, state, state, RecordDecision(WAITING, outcome), 1000.0 + i)
        events, memory = derive(fact, memory, inconclusive_after=1e9)
        kinds += [event.kind for event in events]
    return kinds


def test_a_hold_is_told_once_until_its_reason_changes():
    assert told(
        [
            metrics_error(1),
            metrics_error(2),  # the same hold, numbers aside
            INCONCLUSIVE,
            INCONCLUSIVE,
            Outcome(Reason.INCONCLUSIVE, checks=("error_rate", "ttft_p95")),
        ]
    ) == ["stage_holding", "stage_holding", "stage_holding"]


def test_a_new_stage_tells_a_standing_reason_again():
    first = Looked(SPEC, STEP_0, STEP_0, RecordDecision(WAITING, INCONCLUSIVE), 1.0)
    _, memory = derive(first, Memory(), 1e9)
    assert told([INCONCLUSIVE], STEP_0, memory) == []
    assert told([INCONCLUSIVE], STEP_1, memory) == ["stage_holding"]


def test_routine_holds_tell_nothing_and_capacity_is_its_own_event():
    routine = [
        Outcome(Reason.HOLD_TIME, seconds=60, limit=600),
        Outcome(Reason.PAUSED),
        Outcome(Reason.COMMAND_MOVED),
        Outcome(Reason.GUARD_ONLY),
        Outcome(Reason.STEPPED, step=1),
    ]
    assert told(routine) == []
    assert told([capacity(10), capacity(20)]) == ["capacity_not_ready"]


def test_the_inconclusive_alarm_fires_once_a_stage_past_its_time():
    memory, kinds = Memory(), []
    for now in (0.0, 50.0, 100.0, 150.0):
        fact = Looked(SPEC, STEP_0, STEP_0, RecordDecision(WAITING, INCONCLUSIVE), now)
        events, memory = derive(fact, memory, inconclusive_after=100.0)
        kinds += [event.kind for event in events]
    assert kinds == ["stage_holding", "inconclusive_too_long"]


def test_a_holds_evidence_is_json_without_infinities():
    fact = Looked(SPEC, STEP_0, STEP_0, RecordDecision(WAITING, INCONCLUSIVE), 1.0)
    (event,), _ = derive(fact, Memory(), 1e9)
    document = json.loads(messages.body(event, "json", None))
    assert document["checks"][0]["log_evalue"] is None
    assert document["checks"][0]["log_bound"] == 5.99


def test_slack_gets_the_sentence_and_the_signature_covers_the_timestamp():
    event = Event("promoted", "zero-layer", 1.0, "zero-layer: promoted; nothing to do.")
    assert json.loads(messages.body(event, "slack", "https://d.example/x")) == {
        "text": "zero-layer: promoted; nothing to do. <https://d.example/x|Dashboard>"
    }
    payload = messages.body(event, "json", None)
    assert messages.signature(b"k", 100, payload) != messages.signature(b"k", 101, payload)
    unsigned = messages.headers(event, None, 100, payload)
    assert messages.SIGNATURE not in unsigned
    assert messages.headers(event, b"k", 100, payload)[messages.TIMESTAMP] == "100"


def test_a_split_the_gateway_does_not_serve_is_told_once_with_its_counts_and_a_pending_proof_is_not():
    def refuted(answers: int) -> Outcome:
        cause = f"canary: 5% asked, 0 of {answers} answers from the candidate's endpoints"
        return Outcome(Reason.SPLIT_REFUTED, checks=("data plane",), cause=cause)

    pending = Outcome(
        Reason.SPLIT_UNPROVEN, checks=("data plane",), cause="canary: 5% asked, 3 of 40 answers"
    )
    assert told([pending, pending]) == []
    assert told([refuted(612), refuted(900)]) == ["split_not_served"]  # one hold, its numbers moving
    fact = Looked(SPEC, STEP_0, STEP_0, RecordDecision(WAITING, refuted(612)), 1000.0)
    (event,), _ = derive(fact, Memory(), inconclusive_after=1e9)
    assert "0 of 612 answers from the candidate's endpoints" in event.text
