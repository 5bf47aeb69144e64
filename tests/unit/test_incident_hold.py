"""A shared incident held under `on_shared_incident: hold` goes on by itself once it is over
(gateway/rollout/incident.py): the pure machine with a fake clock and scripted checks, then the pure look
on counters at an even split, then a state saved before the watch existed."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
from prometheus_client import REGISTRY

from bench.shipped_rules import ErrorTests, seed_plan
from gateway.rollout.journal import Journal
from gateway.rollout.outcome import Reason
from gateway.rollout.rollout_state import Alert, Command, Ignored, Phase, RecordDecision, RolloutState
from gateway.rollout.state_store import decode_state, encode_state
from gateway.rollout.telemetry import zero_rollout_series
from tests.support.counting_provider import Traffic
from tests.unit.test_blame import even_split
from tests.unit.test_rollout_look import Run as LookRun
from tests.unit.test_rollout_machine import (
    ERROR,
    FAIL,
    INCONCLUSIVE,
    STEPS,
    Run,
    failing,
    interval,
    make_spec,
)
from tests.unit.test_rollout_reasons import told

CLEAR = 300.0  # incident_clear's default
HELD = make_spec({"steps": STEPS}, on_shared_incident="hold")
SHARED = failing("error_rate", 0.02, shared=True)


def reason(run: Run) -> Reason:
    [decision] = run.of(RecordDecision)
    return decision.outcome.reason


def held(run: Run | None = None) -> Run:
    """At step 1 for 100 s of its 1800 s, then a shared incident: held."""
    run = run or Run(HELD).to_step(1)
    run.after(100, interval())
    run.after(5, SHARED)
    assert (run.state.paused, reason(run)) == (True, Reason.SHARED_INCIDENT)
    return run


def quiet_for(run: Run, seconds: float, every: float = 5.0) -> Run:
    for _ in range(int(seconds / every)):
        run.after(every, interval())
    return run


def test_a_held_incident_goes_on_by_itself_after_a_quiet_incident_clear():
    run = held()
    assert run.state.incident_watch.tests_since == run.now  # the next look restarts the incident's tests
    assert run.state.hold_elapsed(run.now + 600) == 105.0  # the stage's hold is frozen
    quiet_for(run, CLEAR - 5)
    assert (run.state.paused, run.state.incident is not None, reason(run)) == (
        True,
        True,
        Reason.SHARED_INCIDENT_CLEARING,
    )
    assert (
        run.of(RecordDecision)[0].outcome.sentence
        == "hold: shared incident: new tests quiet for 295s of 300s"
    )
    run.after(5, interval())
    assert reason(run) == Reason.SHARED_INCIDENT_CLEARED
    assert (run.state.paused, run.state.incident, run.state.incident_watch) == (False, None, None)
    assert run.state.reason == "shared incident over: new tests quiet for 300s"
    assert run.state.history[-1].target == "step 1"
    assert not run.of(Alert)
    # the stage's hold runs on from where it stopped, and the stage ends after the rest of it
    run.after(1694, interval())
    assert (run.state.step, reason(run)) == (1, Reason.HOLD_TIME)
    run.after(1, interval())
    assert (run.state.step, reason(run)) == (2, Reason.STEPPED)


def test_an_incident_still_going_stays_held_restarts_the_quiet_and_never_rolls_back():
    run = held()
    started = run.now
    for _ in range(3):  # the new tests fire shared again, within incident_clear of their start
        quiet_for(run, 60)
        run.after(5, SHARED)
        assert (reason(run), run.state.paused, run.state.phase) == (
            Reason.SHARED_INCIDENT_STANDING,
            True,
            Phase.PROGRESSING,
        )
        assert run.state.incident_watch.tests_since == started  # at most one start per incident_clear
        assert run.state.incident_watch.quiet_since == run.now
        assert not run.of(Alert)
    run.after(200, SHARED)  # the tests have run incident_clear: they start over
    assert run.state.incident_watch.tests_since == run.now
    quiet_for(run, CLEAR - 5)
    assert run.state.paused
    run.after(5, interval())
    assert (reason(run), run.state.paused) == (Reason.SHARED_INCIDENT_CLEARED, False)


def test_an_untold_error_test_or_a_metrics_error_is_not_quiet():
    run = quiet_for(held(), 200)
    run.after(5, interval(error_rate=INCONCLUSIVE))  # fired, not yet told whose
    assert reason(run) == Reason.SHARED_INCIDENT_STANDING
    assert run.state.incident_watch.quiet_since == run.now
    run.after(5, interval(error_rate=ERROR))  # a metrics error: counted as at any look
    assert (reason(run), run.state.errors) == (Reason.METRICS_ERROR, 1)
    assert run.state.incident_watch.quiet_since == run.now
    run = quiet_for(run, CLEAR)
    assert (reason(run), run.state.errors, run.state.paused) == (Reason.SHARED_INCIDENT_CLEARED, 0, False)


def test_a_candidate_only_failure_during_the_hold_rolls_back():
    run = quiet_for(held(), 100)
    both = [*SHARED]
    both[1] = replace(both[1], verdict=FAIL, shared=False)
    run.after(5, both)
    assert run.state.phase == Phase.ROLLED_BACK
    run.after(5, command=Command.RETRY)
    assert (run.state.incident, run.state.incident_watch) == (None, None)


def test_an_operators_pause_before_the_incident_is_not_lifted():
    run = Run(HELD).to_step(1)
    run.after(5, command=Command.PAUSE)
    run.after(5, SHARED)
    assert reason(run) == Reason.SHARED_INCIDENT
    assert not run.state.incident_watch.paused
    quiet_for(run, CLEAR)
    assert reason(run) == Reason.SHARED_INCIDENT_CLEARED
    assert (run.state.paused, run.state.incident, run.state.reason) == (True, None, "operator pause")
    run.after(5, command=Command.RESUME)
    assert not run.state.paused


def test_an_operators_pause_during_the_incident_is_theirs():
    run = held()
    run.after(5, interval(), Command.PAUSE)  # taken, though the incident paused it already
    assert not run.of(Ignored)
    assert (run.state.paused, run.state.reason, run.state.incident_watch.paused) == (
        True,
        "operator pause",
        False,
    )
    quiet_for(run, CLEAR - 5)
    assert reason(run) == Reason.SHARED_INCIDENT_CLEARED
    assert (run.state.paused, run.state.incident) == (True, None)


def test_an_operator_resume_ends_the_hold_at_once():
    run = held()
    run.after(5, command=Command.RESUME)
    assert (run.state.paused, run.state.incident, run.state.incident_watch) == (False, None, None)


def test_at_an_even_split_a_shared_incident_holds_then_goes_on_when_it_stops():
    """The pure look on counters: both variants fail alike at 50/50, held; the fault stops; the new tests
    stay quiet for incident_clear and the rollout goes on, never rolled back."""
    run = LookRun(even_split(on_shared_incident="hold", incident_clear="60s"))
    run.after(1, {"baseline": Traffic(100), "zero-layer": Traffic(100)})
    for _ in range(30):
        run.after(1, {"baseline": Traffic(100, 20), "zero-layer": Traffic(100, 20)})
        if run.state.incident is not None:
            break
    assert (run.state.paused, run.state.incident is not None) == (True, True)
    for _ in range(10):  # the fault goes on: the new tests fire shared again
        run.after(1, {"baseline": Traffic(100, 20), "zero-layer": Traffic(100, 20)})
    assert (run.state.paused, run.state.incident is not None) == (True, True)
    stopped = run.now
    while run.state.incident is not None and run.now < stopped + 600:
        run.after(1, {"baseline": Traffic(100), "zero-layer": Traffic(100)})
    assert not run.rolled_back()
    assert (run.state.phase, run.state.paused, run.state.incident) == (Phase.PROGRESSING, False, None)
    assert 60 <= run.now - stopped <= 180  # the tests start over at most once per incident_clear
    started = [done.tests_started for done in run.looks if done.tests_started]
    assert any("a shared incident is held" in why for why in started)


def test_the_hold_restarts_the_tests_on_each_variants_own_traffic_and_keeps_the_comparisons():
    run = LookRun(even_split(on_shared_incident="hold"))
    run.after(1, {"baseline": Traffic(100), "zero-layer": Traffic(100)})
    while run.state.incident is None:
        run.after(1, {"baseline": Traffic(100, 20), "zero-layer": Traffic(100, 20)})
    before = run.state.evidence.tests["error_rate"]
    done = run.after(1, {"baseline": Traffic(100, 1), "zero-layer": Traffic(100, 1)})
    assert "the comparisons go on" in done.tests_started
    after = run.state.evidence.tests["error_rate"]
    assert (after.candidate.requests, after.candidate.events) == (100, 1)  # this look's alone
    assert after.blame.candidate_requests == before.blame.candidate_requests + 100  # kept, and added to
    assert run.after(1, {"baseline": Traffic(100), "zero-layer": Traffic(100)}).tests_started is None


def test_a_state_saved_before_the_watch_goes_on_by_itself_when_its_pause_was_the_incidents():
    """Today's format (version 2) with `incident` set and no watch: read, watched from its first look with
    new tests; the pause the incident made is lifted, an operator's is not."""
    run = held()
    old = replace(run.state, incident_watch=None, evidence=None)
    text = encode_state(old)
    assert "incident_watch" not in json.loads(text)["state"]  # a state with no watch is stored as before
    for state, lifted in ((old, True), (replace(old, reason="operator pause"), False)):
        resumed = Run(HELD, now=run.now, state=decode_state(encode_state(state)))
        resumed.after(5, interval())
        assert reason(resumed) == Reason.SHARED_INCIDENT_CLEARING
        assert resumed.state.incident_watch.paused == lifted
        quiet_for(resumed, CLEAR)
        assert (reason(resumed), resumed.state.paused, resumed.state.incident) == (
            Reason.SHARED_INCIDENT_CLEARED,
            not lifted,
            None,
        )
    watched = run.state
    assert decode_state(encode_state(watched)) == watched
    assert isinstance(watched, RolloutState)


def test_the_bench_restarts_the_thresholds_as_the_look_does_and_keeps_the_comparisons():
    """bench.shared_incident's hold simulation starts a held incident's tests as gateway/rollout/evidence.py
    `after_incident` does: the restarted runs' thresholds decide afterwards as new ones fed only the later
    looks; their comparisons as if nothing had restarted."""
    plan, runs = seed_plan(), 8
    rng = np.random.default_rng(3)
    n = rng.poisson(200, (4, runs, 30))
    x = rng.binomial(n, 0.02)
    earlier, later = (n[0], x[0], n[1], x[1]), (n[2][:, :10], x[2][:, :10], n[3][:, :10], x[3][:, :10])
    restarted, fresh, kept = ErrorTests(plan, runs), ErrorTests(plan, runs), ErrorTests(plan, runs)
    restarted.judged(*earlier)
    kept.judged(*earlier)
    mask = np.arange(runs) % 2 == 0
    restarted.after_incident(mask)
    again, anew, going_on = restarted.judged(*later), fresh.judged(*later), kept.judged(*later)
    for field in ("failing", "baseline_failing"):
        assert (getattr(again, field)[mask] == getattr(anew, field)[mask]).all(), field
        assert (getattr(again, field)[~mask] == getattr(going_on, field)[~mask]).all(), field
    assert (restarted.comparison.log_lr == kept.comparison.log_lr).all()
    assert (again.ratio == going_on.ratio).all()
    assert (again.failing[mask] != going_on.failing[mask]).any()  # the restart changed something


def test_a_held_incident_and_its_end_are_counted_by_their_reasons():
    journal = Journal(lambda: "incident-counted", lambda: 0.0)
    zero_rollout_series("incident-counted", (), ())

    def count(result: str) -> float | None:
        labels = {"rollout": "incident-counted", "result": result}
        return REGISTRY.get_sample_value("graystack_rollout_shared_incidents_total", labels)

    assert (count("held"), count("cleared")) == (0.0, 0.0)
    run = Run(HELD).to_step(1)
    for checks in (interval(), SHARED, *[interval()] * int(CLEAR / 5)):
        run.after(5, checks)
        journal.decision(run.of(RecordDecision)[0], run.state, run.now)
    assert reason(run) == Reason.SHARED_INCIDENT_CLEARED
    assert (count("held"), count("cleared")) == (1.0, 1.0)


def test_the_end_of_a_held_incident_is_told_once_as_news():
    """The hold is told once (its quiet spells between firings tell nothing), its end once: the
    IncidentCleared Event and the incident_cleared notification, beside the resume the states show."""
    run, looks = Run(HELD).to_step(1), []
    for checks in (SHARED, *[interval()] * 10, SHARED, *[interval()] * int(CLEAR / 5)):
        run.after(5, checks)
        looks.append((run.before, run.state, tuple(run.actions), run.now))
    events, kinds = told(looks)
    assert events == [
        ("Paused", True),
        ("Holding", False),
        ("Holding", False),
        ("Resumed", False),
        ("IncidentCleared", False),
    ]
    assert kinds == ["paused", "stage_holding", "stage_holding", "incident_cleared"]


def test_a_freeze_during_the_hold_is_not_lifted_when_the_incident_is_over():
    run = held()
    for _ in range(3):  # metrics unreadable up to the error limit: on_error's freeze
        run.after(5, interval(error_rate=ERROR))
    assert reason(run) == Reason.FROZEN
    assert not run.state.incident_watch.paused
    quiet_for(run, CLEAR)
    assert (reason(run), run.state.paused, run.state.incident) == (Reason.SHARED_INCIDENT_CLEARED, True, None)
