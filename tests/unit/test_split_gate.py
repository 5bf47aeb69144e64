"""The user's Gateway API gateway must be proven to serve the split before a stage advances (issue 36):
the machine's SplitGate (gateway/rollout/machine.py) and the proofs it is made of
(gateway/rollout/route_proof.py: the control plane's conditions, then the answers' own split)."""

from __future__ import annotations

from gateway.rollout.machine import initial_state, step
from gateway.rollout.outcome import Reason
from gateway.rollout.rollout_state import CONTROL_PLANE, DATA_PLANE, Command, Phase, RecordDecision, SplitGate
from gateway.rollout.route_proof import RouteProof
from tests.unit.test_rollout_machine import STEPS_ONLY, failing, interval

ASKED = {"baseline": 95, "zero-layer": 5}
PROVEN = SplitGate(None, False, ASKED, "zero-layer: 5% asked, 31 of 640 answers")
PENDING = SplitGate(DATA_PLANE, False, ASKED, "zero-layer: 5% asked, 3 of 40 answers")
REFUTED = SplitGate(DATA_PLANE, True, ASKED, "zero-layer: 5% asked, 0 of 612 answers")
NOT_ACCEPTED = SplitGate(CONTROL_PLANE, False, ASKED, "Gateway infra/shared has not reported on the route")


def decided(actions: list) -> RecordDecision:
    return next(a for a in actions if isinstance(a, RecordDecision))


def test_a_stage_advances_only_once_its_split_is_proven_served():
    state = initial_state(STEPS_ONLY, 0.0)  # step 0, 5 %, a 600 s hold
    for gate, reason in ((NOT_ACCEPTED, Reason.SPLIT_UNPROVEN), (PENDING, Reason.SPLIT_UNPROVEN)):
        state, actions = step(STEPS_ONLY, state, interval(), None, 600.0, split=gate)
        assert (state.step, decided(actions).outcome.reason) == (0, reason)
    outcome = decided(actions).outcome
    assert (
        outcome.sentence == "hold: the split is not yet proven served: zero-layer: 5% asked, 3 of 40 answers"
    )
    assert outcome.checks == (DATA_PLANE,)  # which proof holds it: a new one is a new hold, told again
    state, _ = step(STEPS_ONLY, state, interval(), None, 610.0, split=PROVEN)
    assert (state.step, state.weight) == (1, 20)


def test_a_data_plane_serving_another_split_holds_at_once_and_names_the_counts():
    state = initial_state(STEPS_ONLY, 0.0)
    state, actions = step(STEPS_ONLY, state, interval(), None, 30.0, split=REFUTED)  # within its hold
    outcome = decided(actions).outcome
    assert outcome.reason == Reason.SPLIT_REFUTED
    assert "0 of 612 answers" in outcome.sentence
    state, actions = step(STEPS_ONLY, state, interval(), None, 900.0, split=REFUTED)
    assert (state.step, decided(actions).outcome.reason) == (0, Reason.SPLIT_REFUTED)  # never "verified"


def test_an_unproven_split_never_stops_a_rollback_nor_an_operator():
    state = initial_state(STEPS_ONLY, 0.0)
    state, _ = step(STEPS_ONLY, state, failing(), None, 30.0, split=REFUTED)
    assert (state.phase, state.weight) == (Phase.ROLLED_BACK, 0)
    state = initial_state(STEPS_ONLY, 0.0)
    state, _ = step(STEPS_ONLY, state, None, Command.PROMOTE, 30.0, split=REFUTED)
    assert state.step == 1


def proof_of(share: float, answers: int) -> RouteProof:
    proof = RouteProof.start(ASKED, "zero-layer").accepted(100.0)
    candidate = round(share * answers)
    return proof.add({"zero-layer": candidate, "baseline": answers - candidate}, {})


def test_the_route_proof_waits_for_the_control_plane_and_then_tests_the_answers():
    fresh = RouteProof.start(ASKED, "zero-layer")
    ignored = fresh.add({"zero-layer": 0, "baseline": 900}, {})  # before the acceptance: the split before
    assert ignored.test.answers == 0
    lagging = [
        ("HTTPRoute default/llm: Gateway infra/shared: Accepted is of generation 3, the write was 4", False)
    ]
    gate = fresh.gate(lagging, alpha=0.01)
    assert (gate.waiting_on, gate.refuted) == (CONTROL_PLANE, False)
    refusal = [
        ("HTTPRoute default/llm: Gateway infra/shared: Accepted is False (NotAllowedByListeners)", True)
    ]
    assert fresh.gate(refusal, alpha=0.01).refuted
    assert proof_of(0.05, 2000).gate([], alpha=0.01).proven
    nothing = proof_of(0.0, 612).gate([], alpha=0.01)
    assert (nothing.waiting_on, nothing.refuted) == (DATA_PLANE, True)
    assert nothing.reason.startswith("zero-layer: 5% asked, 0 of 612 answers from the candidate's endpoints")
    assert proof_of(0.05, 40).gate([], alpha=0.01).waiting_on == DATA_PLANE  # too few to say either way


def test_answers_count_from_the_settle_after_the_acceptance():
    written = RouteProof.start(ASKED, "zero-layer", settle=2.0)
    assert written.counted_from is None  # not accepted: nothing counts yet
    accepted = written.accepted(100.0).accepted(104.0)  # the first acceptance holds
    assert accepted.counted_from == 102.0
    assert RouteProof.start(ASKED, "zero-layer").accepted(100.0).counted_from == 100.0


def test_answers_no_variant_served_are_said_with_why():
    proof = RouteProof.start(ASKED, "zero-layer").accepted(0.0)
    proof = proof.add({"baseline": 10}, {"with no upstream host in the access log": 7})
    proof = proof.add({"baseline": 10}, {"with no upstream host in the access log": 2, "from 10.0.9.9": 1})
    reason = proof.gate([], alpha=0.01).reason
    assert reason.endswith(
        "answers no variant's endpoint served: 9 with no upstream host in the access log, 1 from 10.0.9.9"
    )


def test_a_rollback_is_proven_at_zero():
    back = RouteProof.start({"baseline": 100, "zero-layer": 0}, "zero-layer").accepted(0.0)
    assert back.add({"baseline": 300}, {}).gate([], alpha=0.01).waiting_on == DATA_PLANE
    assert back.add({"baseline": 1500}, {}).gate([], alpha=0.01).proven
    leaking = back.add({"baseline": 1400, "zero-layer": 100}, {}).gate([], alpha=0.01)
    assert leaking.refuted
