"""The rollout state machine, driven with a fake clock (plain floats) and scripted analysis results."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gateway.rollout.analysis import Check, Verdict
from gateway.rollout.machine import initial_state, rollback_acked, step
from gateway.rollout.outcome import Reason
from gateway.rollout.rollout_state import Alert, Command, Ignored, Phase, RecordDecision, RolloutState
from gateway.rollout.stages import HISTORY_LIMIT
from gateway.spec.model import RolloutSpec, SpecError, validate_spec

PASS, FAIL, INCONCLUSIVE, ERROR = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.ERROR

STEPS = [{"weight": 5, "hold": "10m"}, {"weight": 20, "hold": "30m"}, {"weight": 100}]
SHADOW = {"percent": 100, "duration": "5m", "gate": {"success_rate": 0.995, "max_latency_ratio": 0.5}}


def make_spec(strategy: dict | None, **analysis) -> RolloutSpec:
    """DESIGN's example spec, with `strategy` (None: manual mode) and analysis overrides."""
    data = {
        "name": "zero-layer",
        "variants": {
            "baseline": {"endpoints": ["127.0.0.1:8001"]},
            "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
        },
        "routing": {"header": "X-Client-Type", "weights": {"baseline": 95, "zero-layer": 5}},
        "analysis": {"interval": "5s", "window": "60s", "min_requests": 100, **analysis},
    }
    if strategy is not None:
        data["strategy"] = strategy
    return validate_spec(data)


SPEC = make_spec({"shadow": SHADOW, "steps": STEPS})  # shadow 300 s, then 5 % 600 s, 20 % 1800 s, 100 %
STEPS_ONLY = make_spec({"steps": STEPS})
MANUAL = make_spec(None)


def interval(verdict: Verdict = PASS, **verdicts: Verdict) -> list[Check]:
    """One analysis interval: every check at `verdict`, except those named; values that pass the gate."""
    values = {"error_rate": 0.0005, "ttft_vs_baseline": 0.4, "ttft_p95": 0.01, "weight_status": 0.0}
    thresholds = {"error_rate": 0.003, "ttft_vs_baseline": 1.2, "ttft_p95": 0.05, "weight_status": 0.0}
    checks = []
    for name, value in values.items():
        v = verdicts.get(name, verdict)
        shown = None if v == ERROR else value
        checks.append(Check(name, v, shown, 0 if v == ERROR else 2000, None, thresholds[name], f"{name} {v}"))
    return checks


def failing(name: str = "ttft_vs_baseline", value: float = 2.4, shared: bool = False) -> list[Check]:
    checks = interval()
    index = next(i for i, c in enumerate(checks) if c.name == name)
    checks[index] = Check(
        name, FAIL, value, 1500, 2.1, 1.2, f"TTFT {value}x the baseline's", 9.1, 6.2, shared
    )
    return checks


class Run:
    """A controller stand-in: the state before and after the last call, the clock, and that call's actions."""

    def __init__(self, spec: RolloutSpec = SPEC, now: float = 1000.0, state: RolloutState | None = None):
        self.spec, self.now = spec, now
        self.state = state if state is not None else initial_state(spec, now)
        self.before = self.state
        self.actions: list = []

    def at(self, now: float, checks: list[Check] | None = None, command: Command | None = None) -> Run:
        self.now = now
        self.before = self.state
        self.state, self.actions = step(self.spec, self.state, checks, command, now)
        return self

    def after(self, seconds: float, checks: list[Check] | None = None, command: Command | None = None) -> Run:
        return self.at(self.now + seconds, checks, command)

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]

    def split(self) -> tuple[int | None, int]:
        """What the controller puts live for the state: zero-layer's weight in the default split (None:
        the spec's own) and the percentage of requests mirrored to it."""
        return self.state.weight, self.state.shadow_percent

    def moved_split(self) -> list[tuple[int | None, int]]:
        """The split, if the last call changed it (the controller pushes then); else nothing."""
        return [self.split()] if self.split() != (self.before.weight, self.before.shadow_percent) else []

    def to_step(self, index: int) -> Run:
        """Pass every stage up to step `index`, each exactly at the end of its hold."""
        if self.state.phase == Phase.SHADOW:
            self.after(self.spec.strategy.shadow.duration, interval())
        while self.state.step < index:
            self.after(self.spec.strategy.steps[self.state.step].hold, interval())
        assert (self.state.phase, self.state.step) == (Phase.PROGRESSING, index)
        return self


# --- starting and advancing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "phase", "weight", "shadow"),
    [(SPEC, Phase.SHADOW, 0, 100), (STEPS_ONLY, Phase.PROGRESSING, 5, 0), (MANUAL, Phase.MANUAL, None, 0)],
)
def test_a_rollout_starts_in_its_first_stage(spec, phase, weight, shadow):
    state = initial_state(spec, 1000.0)
    assert (state.phase, state.step, state.weight, state.shadow_percent) == (phase, 0, weight, shadow)
    assert not state.paused
    assert state.history == ()


def test_a_passing_rollout_walks_shadow_then_every_step_to_promoted():
    run = Run()
    splits = []
    for hold in (300, 600, 1800):
        run.after(hold - 5, interval())  # not yet: the hold has not elapsed
        assert not run.moved_split()
        run.after(5, interval())
        splits += run.moved_split()
    run.after(5, interval())  # the last step holds 0 s
    assert splits == [(5, 0), (20, 0), (100, 0)]
    assert (run.state.phase, run.state.weight) == (Phase.PROMOTED, 100)
    assert [t.target for t in run.state.history] == ["step 0", "step 1", "step 2", "promoted"]


def test_each_advance_moves_the_split_once_and_starts_a_fresh_hold():
    run = Run().after(300, interval())
    assert run.moved_split() == [(5, 0)]  # shadow off, 5 % to zero-layer
    assert (run.state.phase, run.state.step, run.state.held) == (Phase.PROGRESSING, 0, 0.0)
    run.after(600, interval())
    assert run.moved_split() == [(20, 0)]
    run.after(1800, interval())
    assert run.moved_split() == [(100, 0)]
    assert run.state.phase == Phase.PROGRESSING  # the last step holds 0 s but still needs a passing interval
    run.after(5, interval())
    assert run.state.phase == Phase.PROMOTED
    assert not run.moved_split()  # promoted keeps the last step's weight
    assert run.split() == (100, 0)


def test_a_pass_before_the_hold_elapsed_does_not_advance():
    run = Run(STEPS_ONLY)
    for _ in range(10):
        run.after(59, interval())
    assert (run.state.step, run.state.weight) == (0, 5)
    assert "hold: 590s of 600s" in run.of(RecordDecision)[0].outcome.sentence


@pytest.mark.parametrize(
    ("name", "checks"),
    [
        ("one inconclusive", interval(error_rate=INCONCLUSIVE)),
        ("all inconclusive", interval(INCONCLUSIVE)),
        ("weight status unverified", interval(weight_status=INCONCLUSIVE)),
        ("no checks at all", []),
    ],
)
def test_anything_short_of_all_pass_holds_forever(name, checks):
    run = Run(STEPS_ONLY)
    for _ in range(100):
        run.after(60, checks)
    assert (run.state.phase, run.state.step, run.state.weight) == (Phase.PROGRESSING, 0, 5), name
    assert run.of(RecordDecision)[0].outcome.reason == Reason.INCONCLUSIVE
    run.after(5, interval())  # one passing interval after the hold: now it moves
    assert (run.state.step, run.state.weight) == (1, 20)


def test_no_checks_this_call_never_advances():
    run = Run(STEPS_ONLY).after(10_000)
    assert run.state.step == 0
    assert run.actions == []


# --- shadow --------------------------------------------------------------------------------------


def test_shadow_mirrors_traffic_and_leaves_through_the_gate_into_step_0():
    run = Run()
    assert (run.state.weight, run.state.shadow_percent) == (0, 100)
    run.after(299, interval())
    assert run.state.phase == Phase.SHADOW
    run.after(1, interval())
    assert (run.state.phase, run.state.step, run.state.weight, run.state.shadow_percent) == (
        Phase.PROGRESSING,
        0,
        5,
        0,
    )


@pytest.mark.parametrize(
    ("spec", "checks", "why"),
    [
        # the TTFT comparison passes (no evidence of a slowdown) but is not the 2x speed-up the gate wants
        (
            SPEC,
            [*interval()[:1], Check("ttft_vs_baseline", PASS, 0.8, 2000, None, 1.2, "")],
            "latency ratio 0.800",
        ),
        (
            SPEC,
            [*interval()[:1], Check("ttft_vs_baseline", PASS, None, 2000, None, 1.2, "")],
            "no latency ratio yet",
        ),
        (
            make_spec({"shadow": {**SHADOW, "gate": {"success_rate": 0.9999}}, "steps": STEPS}),
            interval(),
            "success rate 0.9995 below 0.9999",
        ),
        (SPEC, [c for c in interval() if c.name != "error_rate"], "no error-rate value"),
    ],
)
def test_a_shadow_gate_miss_holds_in_shadow_without_rolling_back(spec, checks, why):
    run = Run(spec).after(10_000, checks)
    assert (run.state.phase, run.state.weight, run.state.shadow_percent) == (Phase.SHADOW, 0, 100)
    outcome = run.of(RecordDecision)[0].outcome.sentence
    assert "shadow gate" in outcome
    assert why in outcome
    assert not run.of(Alert)


def test_a_failing_check_in_shadow_rolls_back_and_stops_the_mirror():
    run = Run().after(10, failing())
    assert (run.state.phase, run.state.weight, run.state.shadow_percent) == (Phase.ROLLED_BACK, 0, 0)
    assert run.moved_split() == [(0, 0)]


# --- the guard: FAIL rolls back at once, in every phase -------------------------------------------


def _in_phase(phase: str) -> Run:
    if phase == "shadow":
        return Run()
    if phase == "step 1":
        return Run().to_step(1)
    if phase == "paused":
        return Run().to_step(1).after(5, command=Command.PAUSE)
    if phase == "promoted":
        run = Run(STEPS_ONLY).to_step(2).after(0, interval())
        assert run.state.phase == Phase.PROMOTED
        return run
    if phase == "manual":
        return Run(MANUAL)
    if phase == "rolled_back":
        return Run().after(5, command=Command.ROLLBACK)
    raise AssertionError(phase)


@pytest.mark.parametrize("phase", ["shadow", "step 1", "paused", "promoted", "manual"])
def test_one_failing_check_rolls_back_at_once_in_any_phase(phase):
    run = _in_phase(phase).after(5, failing("ttft_p95", 2.7))
    assert run.state.phase == Phase.ROLLED_BACK
    assert (run.state.weight, run.state.shadow_percent, run.state.paused) == (0, 0, False)
    assert run.moved_split() == [(0, 0)]
    assert run.state.rollback_started == run.now
    assert len(run.of(Alert)) == 1


def test_the_guard_stays_on_after_100_percent():
    run = _in_phase("promoted")
    for _ in range(20):
        run.after(5, interval())
    assert run.state.phase == Phase.PROMOTED
    assert run.of(RecordDecision)[0].outcome.sentence == "guard: no failing check"
    run.after(5, failing())
    assert (run.state.phase, run.state.weight) == (Phase.ROLLED_BACK, 0)


def test_a_shared_incident_rolls_back_by_default_and_says_it_is_shared():
    run = Run(STEPS_ONLY).to_step(1).after(5, failing("error_rate", 0.02, shared=True))
    assert (run.state.phase, run.state.weight) == (Phase.ROLLED_BACK, 0)
    assert "shared" in run.state.reason or "shared" in run.of(Alert)[0].message


def test_a_shared_incident_under_hold_alerts_once_keeps_the_weights_and_pauses():
    run = Run(make_spec({"steps": STEPS}, on_shared_incident="hold")).to_step(1)
    run.after(5, failing("error_rate", 0.02, shared=True))
    assert (run.state.phase, run.state.weight, run.state.paused) == (Phase.PROGRESSING, 20, True)
    assert run.state.incident is not None
    assert len(run.of(Alert)) == 1
    assert "shared incident" in run.of(Alert)[0].message
    assert "weights held at 20%" in run.of(Alert)[0].message
    for _ in range(3):  # the incident goes on: no new alert, no rollback, no advance
        run.after(3600, failing("error_rate", 0.02, shared=True))
        assert not run.of(Alert)
        assert (run.state.phase, run.state.step, run.state.weight) == (Phase.PROGRESSING, 1, 20)


def test_a_candidate_specific_failure_during_a_held_incident_still_rolls_back():
    run = Run(make_spec({"steps": STEPS}, on_shared_incident="hold")).to_step(1)
    run.after(5, failing("error_rate", 0.02, shared=True))
    both = failing("error_rate", 0.02, shared=True)
    both[1] = Check("ttft_vs_baseline", FAIL, 2.0, 900, None, 1.2, "slower", 8.0, 6.2, False)
    run.after(5, both)
    assert run.state.phase == Phase.ROLLED_BACK


def test_a_held_incident_and_resuming_it_start_new_tests_and_retry_does_too():
    evidence = object()  # the machine never looks inside the evidence: it keeps it or drops it
    spec = make_spec({"steps": STEPS}, on_shared_incident="hold")
    run = Run(spec).to_step(1)
    run.state = replace(run.state, evidence=evidence)
    run.after(5, interval())
    assert run.state.evidence is evidence  # kept across looks and stages
    run.after(5, failing("error_rate", 0.02, shared=True))
    assert run.state.evidence is evidence  # the look restarts some of its tests (gateway/rollout/incident.py)
    assert run.state.incident_watch.tests_since == run.now
    run.after(5, command=Command.RESUME)
    assert (run.state.evidence, run.state.incident, run.state.paused) == (None, None, False)
    assert run.state.incident_watch is None
    run.state = replace(run.state, evidence=evidence)
    run.after(5, command=Command.ROLLBACK)
    assert run.state.evidence is evidence  # a rollback keeps the tests: retry decides
    run.after(5, command=Command.RETRY)
    assert run.state.evidence is None


def test_a_rollback_reason_carries_the_evidence():
    run = Run().to_step(1).after(5, failing("error_rate", 0.05))
    reason = run.state.reason
    assert reason.startswith("rolled back: error_rate fail")
    for evidence in ("value 0.05", "1500 samples", "bound 2.1", "threshold 1.2", "log e-value 9.10 vs 6.20"):
        assert evidence in reason
    assert run.of(Alert) == [Alert(reason)]
    assert run.state.history[-1].target == "rolled_back"


def test_failures_after_the_rollback_change_nothing_and_keep_the_first_failing_sample():
    run = Run().to_step(1).after(5, failing())
    first = run.now
    for _ in range(5):
        run.after(5, failing())
        assert not run.moved_split()
        assert run.split() == (0, 0)
        assert not run.of(Alert)
        assert run.of(RecordDecision)[0].outcome.sentence == "recorded only: rolled back"
    for _ in range(5):
        run.after(5, interval())  # passes do not bring it back either: only `retry` does
    assert run.state.phase == Phase.ROLLED_BACK
    assert run.state.rollback_started == first


def test_a_failing_check_beats_a_command_in_the_same_call():
    run = Run().to_step(0).after(5, failing(), Command.PROMOTE)
    assert run.state.phase == Phase.ROLLED_BACK
    assert run.of(Ignored)[0].command == Command.PROMOTE


def test_a_failing_check_beats_an_error_in_the_same_interval():
    checks = [*interval(ERROR)[:3], *failing("weight_status", 1.0)[3:]]
    run = Run().to_step(0).after(5, checks)
    assert run.state.phase == Phase.ROLLED_BACK


# --- flapping inputs ------------------------------------------------------------------------------


def test_flapping_pass_and_inconclusive_advance_only_on_a_pass_after_the_hold():
    run = Run(STEPS_ONLY)
    pattern = [interval(), interval(INCONCLUSIVE)]
    for i in range(119):  # 119 x 5 s: the 600 s hold not yet elapsed
        run.after(5, pattern[i % 2])
        assert run.state.step == 0
    run.after(5, interval(INCONCLUSIVE))  # hold elapsed, but inconclusive
    assert run.state.step == 0
    run.after(5, interval())
    assert run.state.step == 1
    run.after(5, interval())  # the next step's hold starts now: no double advance
    assert run.state.step == 1


def test_flapping_pass_and_fail_rolls_back_on_the_first_fail():
    run = Run(STEPS_ONLY)
    run.after(5, interval()).after(5, interval(INCONCLUSIVE)).after(5, interval())
    assert run.state.phase == Phase.PROGRESSING
    run.after(5, failing())
    assert run.state.phase == Phase.ROLLED_BACK
    run.after(5, interval())
    assert run.state.phase == Phase.ROLLED_BACK


# --- ERROR: retry, then on_error ------------------------------------------------------------------


def test_metrics_errors_retry_then_freeze_with_one_alert():
    run = Run(STEPS_ONLY).after(100, interval())
    for n in (1, 2):
        run.after(5, interval(ERROR))
        assert not run.state.paused
        assert not run.of(Alert)
        assert f"metrics error {n} of 3" in run.of(RecordDecision)[0].outcome.sentence
    run.after(5, interval(ERROR))
    assert run.state.paused
    assert run.state.reason.startswith("frozen: metrics unavailable for 3 intervals")
    assert len(run.of(Alert)) == 1
    assert "weights frozen at 5%" in run.of(Alert)[0].message
    held = run.state.held
    for _ in range(3):
        run.after(5, interval(ERROR))
        assert not run.of(Alert)  # alerted once, not every interval
    run.after(1000, interval())  # metrics back: still frozen until an operator resumes
    assert run.state.paused
    assert run.state.step == 0
    assert run.state.held == held
    run.after(5, command=Command.RESUME)
    assert (run.state.paused, run.state.errors) == (False, 0)
    assert not run.moved_split()
    assert run.split() == (5, 0)


def test_resuming_a_frozen_rollout_gives_the_metrics_a_fresh_retry_budget():
    run = Run(STEPS_ONLY)
    for _ in range(4):
        run.after(5, interval(ERROR))
    run.after(5, command=Command.RESUME)
    run.after(5, interval(ERROR)).after(5, interval(ERROR))
    assert not run.state.paused
    run.after(5, interval(ERROR))
    assert run.state.paused
    assert len(run.of(Alert)) == 1


def test_metrics_errors_roll_back_when_the_spec_says_so():
    spec = make_spec({"steps": STEPS}, on_error="rollback")
    run = Run(spec).after(5, interval(ERROR)).after(5, interval(ERROR))
    assert run.state.phase == Phase.PROGRESSING
    run.after(5, interval(ERROR))
    assert (run.state.phase, run.state.weight) == (Phase.ROLLED_BACK, 0)
    assert "metrics unavailable for 3 intervals" in run.state.reason


@pytest.mark.parametrize("between", [interval(), interval(INCONCLUSIVE)])
def test_any_interval_without_an_error_resets_the_error_count(between):
    run = Run(STEPS_ONLY)
    for _ in range(5):
        run.after(5, interval(ERROR)).after(5, interval(ERROR)).after(5, between)
    assert (run.state.paused, run.state.errors) == (False, 0)


def test_one_error_check_makes_the_interval_an_error_interval():
    run = Run(STEPS_ONLY)
    for _ in range(3):
        run.after(5, interval(weight_status=ERROR))
    assert run.state.paused


def test_errors_after_100_percent_alert_without_moving_or_roll_back_per_spec():
    run = _in_phase("promoted")
    for _ in range(3):
        run.after(5, interval(ERROR))
    assert (run.state.phase, run.state.paused, run.state.weight) == (Phase.PROMOTED, False, 100)
    assert len(run.of(Alert)) == 1
    manual = Run(make_spec(None, on_error="rollback"))
    for _ in range(3):
        manual.after(5, interval(ERROR))
    assert (manual.state.phase, manual.state.weight) == (Phase.ROLLED_BACK, 0)


def test_on_error_is_a_validated_spec_field():
    assert MANUAL.analysis.on_error == "freeze"
    with pytest.raises(SpecError, match=r"analysis\.on_error"):
        make_spec(None, on_error="ignore")


# --- clock jumps ----------------------------------------------------------------------------------


def test_a_clock_jumping_backwards_neither_loses_nor_restarts_the_hold():
    run = Run(STEPS_ONLY, now=10_000.0).after(300, interval())
    assert run.state.held == 300
    run.at(5_000.0, interval())  # the clock goes back 5,300 s
    assert run.state.held == 300  # not negative, not zero
    assert run.state.hold_elapsed(4_000.0) == 300  # even further back
    run.after(299, interval())
    assert run.state.step == 0
    run.after(1, interval())  # 300 + 299 + 1 = 600 s of real hold
    assert run.state.step == 1


def test_a_clock_jumping_forwards_completes_a_hold_but_never_skips_a_step():
    run = Run(now=0.0).after(86_400 * 30, interval())  # a month later
    assert (run.state.phase, run.state.step) == (Phase.PROGRESSING, 0)
    run.after(0, interval())
    assert run.state.step == 0  # step 0's hold starts at the jump
    run.at(86_400 * 365, interval())
    assert run.state.step == 1


# --- pause and resume -----------------------------------------------------------------------------


def test_pause_freezes_the_hold_and_resume_continues_it():
    run = Run(STEPS_ONLY).after(200, interval()).after(0, command=Command.PAUSE)
    assert run.state.paused
    assert run.state.weight == 5
    assert not run.moved_split()
    for _ in range(20):
        run.after(100, interval())  # 2,000 s paused, every interval passing
    assert (run.state.step, run.state.held) == (0, 200)
    assert run.of(RecordDecision)[0].outcome.sentence == "hold: paused"
    run.after(50, command=Command.RESUME)
    assert (run.state.paused, run.state.held) == (False, 200)
    run.after(399, interval())
    assert run.state.step == 0
    run.after(1, interval())
    assert run.state.step == 1


def test_pause_in_shadow_freezes_the_shadow_duration():
    run = Run().after(100).after(0, command=Command.PAUSE).after(10_000).after(0, command=Command.RESUME)
    run.after(199, interval())
    assert run.state.phase == Phase.SHADOW
    run.after(1, interval())
    assert run.state.phase == Phase.PROGRESSING


# --- restarts -------------------------------------------------------------------------------------


def _restart(state: RolloutState) -> RolloutState:
    """What a new process sees: the state as JSON text, parsed back."""
    return RolloutState.from_dict(json.loads(json.dumps(state.to_dict())))


def test_a_controller_killed_at_step_1_resumes_at_step_1_with_the_remaining_hold():
    before = Run().to_step(1).after(1000, interval())
    assert (before.state.weight, before.state.held) == (20, 1000)
    restored = _restart(before.state)
    assert restored == before.state
    after = Run(SPEC, state=restored, now=before.now).after(100, interval())  # 100 s of downtime
    assert (after.state.phase, after.state.step, after.state.weight) == (Phase.PROGRESSING, 1, 20)
    assert not after.moved_split()  # same weights: nothing to push
    assert after.state.held == 1100  # the downtime counted (traffic flowed); not a fresh hold
    after.after(699, interval())
    assert after.state.step == 1
    after.after(1, interval())
    assert after.state.step == 2


def test_a_restart_while_paused_keeps_the_frozen_hold_exactly():
    before = Run(STEPS_ONLY).after(250, interval()).after(0, command=Command.PAUSE)
    after = Run(STEPS_ONLY, state=_restart(before.state), now=before.now).after(9_999, interval())
    assert (after.state.paused, after.state.held, after.state.step) == (True, 250, 0)


def test_a_restart_mid_rollback_keeps_the_first_failing_sample():
    before = Run().to_step(1).after(5, failing())
    restored = _restart(before.state)
    _, seconds = rollback_acked(restored, before.now + 2.5)
    assert seconds == 2.5


# --- operator commands in every phase -------------------------------------------------------------

COMMANDS = [
    # phase, command, phase after (None: ignored), step after
    ("shadow", Command.PAUSE, "shadow (paused)"),
    ("shadow", Command.RESUME, None),
    ("shadow", Command.PROMOTE, "step 0"),
    ("shadow", Command.ROLLBACK, "rolled_back"),
    ("shadow", Command.RETRY, None),
    ("step 1", Command.PAUSE, "step 1 (paused)"),
    ("step 1", Command.RESUME, None),
    ("step 1", Command.PROMOTE, "step 2"),
    ("step 1", Command.ROLLBACK, "rolled_back"),
    ("step 1", Command.RETRY, None),
    ("paused", Command.PAUSE, None),
    ("paused", Command.RESUME, "step 1"),
    ("paused", Command.PROMOTE, "step 2 (paused)"),
    ("paused", Command.ROLLBACK, "rolled_back"),
    ("paused", Command.RETRY, None),
    ("promoted", Command.PAUSE, None),
    ("promoted", Command.RESUME, None),
    ("promoted", Command.PROMOTE, None),
    ("promoted", Command.ROLLBACK, "rolled_back"),
    ("promoted", Command.RETRY, None),
    ("manual", Command.PAUSE, None),
    ("manual", Command.RESUME, None),
    ("manual", Command.PROMOTE, None),
    ("manual", Command.ROLLBACK, "rolled_back"),
    ("manual", Command.RETRY, None),
    ("rolled_back", Command.PAUSE, None),
    ("rolled_back", Command.RESUME, None),
    ("rolled_back", Command.PROMOTE, None),
    ("rolled_back", Command.ROLLBACK, None),
    ("rolled_back", Command.RETRY, "shadow"),
]


@pytest.mark.parametrize(("phase", "command", "target"), COMMANDS)
def test_every_command_in_every_phase(phase, command, target):
    run = _in_phase(phase)
    before = run.state
    run.after(5, command=command)
    if target is None:
        [ignored] = run.of(Ignored)
        assert ignored.command == command
        assert ignored.reason
        assert (run.state.phase, run.state.step, run.state.weight, run.state.paused) == (
            before.phase,
            before.step,
            before.weight,
            before.paused,
        )
        assert run.state.history == before.history
        assert not run.moved_split()
    else:
        assert not run.of(Ignored)
        assert run.state.label() == target
        assert run.state.history[-1].reason.startswith(("operator", "rolled back: operator"))


def test_promote_from_the_last_step_promotes_and_skips_the_rest_of_the_hold():
    run = Run(STEPS_ONLY).after(1, command=Command.PROMOTE)
    assert (run.state.step, run.state.weight) == (1, 20)
    run.after(1, command=Command.PROMOTE).after(1, command=Command.PROMOTE)
    assert (run.state.phase, run.state.weight) == (Phase.PROMOTED, 100)


def test_a_command_and_a_passing_interval_move_one_stage_only():
    run = Run(STEPS_ONLY).to_step(1).after(5, interval(), Command.PROMOTE)  # into step 2, which holds 0 s
    assert run.state.label() == "step 2"
    run = Run(STEPS_ONLY).after(600).after(0, command=Command.PAUSE)  # the hold elapsed while running
    run.after(0, interval(), Command.RESUME)
    assert run.state.label() == "step 0"
    run.after(5, interval())
    assert run.state.label() == "step 1"


def test_promote_while_paused_moves_a_stage_and_keeps_the_pause():
    run = _in_phase("paused").after(5, command=Command.PROMOTE)
    assert (run.state.step, run.state.weight, run.state.paused, run.state.held) == (2, 100, True, 0)
    run.after(1000, interval())
    assert run.state.phase == Phase.PROGRESSING


@pytest.mark.parametrize(
    ("spec", "label", "weight", "shadow"),
    [(SPEC, "shadow", 0, 100), (STEPS_ONLY, "step 0", 5, 0), (MANUAL, "manual", None, 0)],
)
def test_retry_after_a_rollback_starts_the_first_stage_afresh(spec, label, weight, shadow):
    run = Run(spec)
    if spec.strategy is not None:
        run.after(500, interval())
    run.after(5, failing()).after(5, command=Command.RETRY)
    assert run.state.label() == label
    assert (run.state.weight, run.state.shadow_percent) == (weight, shadow)
    assert run.moved_split() == [(weight, shadow)]
    assert (run.state.held, run.state.errors, run.state.rollback_started) == (0, 0, None)
    assert run.state.history[-1].reason == "operator retry"


def test_an_operator_rollback_is_timed_from_the_command():
    run = Run().to_step(1).after(5, command=Command.ROLLBACK)
    assert run.state.reason == "rolled back: operator rollback"
    assert run.state.rollback_started == run.now
    assert run.moved_split() == [(0, 0)]


# --- manual mode ----------------------------------------------------------------------------------


def test_manual_mode_never_sets_weights_but_still_rolls_back():
    run = Run(MANUAL)
    for checks in (interval(), interval(INCONCLUSIVE), interval(), None):
        run.after(5, checks)
        assert run.split() == (None, 0)
        assert run.state.phase == Phase.MANUAL
    run.after(5, failing())
    assert run.moved_split() == [(0, 0)]
    run.after(5, command=Command.RETRY)
    assert run.state.phase == Phase.MANUAL
    assert run.moved_split() == [(None, 0)]  # back to the spec's own split


# --- rollback completion --------------------------------------------------------------------------


def test_rollback_seconds_run_from_the_first_failing_sample_to_the_last_ack():
    run = Run().to_step(1).after(5, failing())
    first_failure = run.now
    run.after(5, failing())  # a second failing sample does not move the start
    state, seconds = rollback_acked(run.state, first_failure + 7.25)
    assert seconds == 7.25
    assert state.rollback_started is None
    assert state.phase == Phase.ROLLED_BACK
    assert rollback_acked(state, first_failure + 9) == (state, None)  # once only


def test_a_rollback_acked_backwards_in_time_is_never_negative():
    run = Run().after(5, failing())
    assert rollback_acked(run.state, run.now - 10)[1] == 0.0


# --- records --------------------------------------------------------------------------------------


def test_every_interval_is_recorded_with_its_checks_and_outcome():
    checks = interval(error_rate=INCONCLUSIVE)
    run = Run(STEPS_ONLY).after(5, checks)
    [decision] = run.of(RecordDecision)
    assert decision.checks == tuple(checks)
    assert decision.outcome.sentence
    assert run.actions[0] == decision


def test_history_is_bounded():
    run = Run(STEPS_ONLY)
    for _ in range(HISTORY_LIMIT):
        run.after(1, command=Command.PAUSE).after(1, command=Command.RESUME)
    assert len(run.state.history) == HISTORY_LIMIT
    assert run.state.history[-1].target == "step 0"


def test_state_round_trips_through_plain_json():
    state = Run().to_step(1).after(5, command=Command.PAUSE).state
    text = json.dumps(state.to_dict())
    assert RolloutState.from_dict(json.loads(text)) == state


@pytest.mark.parametrize(
    "change",
    [{"phase": "launching"}, {"weight": "twenty"}, {"surprise": 1}, {"history": [{"at": 1.0}]}],
)
def test_state_from_foreign_data_is_refused(change):
    data = {**Run().state.to_dict(), **change}
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic's ValidationError is one
        RolloutState.from_dict(data)


# --- the spec changing under a rollout ------------------------------------------------------------


def test_a_changed_step_weight_is_applied():
    run = Run(STEPS_ONLY).to_step(1)
    run.spec = make_spec(
        {"steps": [{"weight": 5, "hold": "10m"}, {"weight": 30, "hold": "30m"}, {"weight": 100}]}
    )
    run.after(5)
    assert (run.state.step, run.state.weight) == (1, 30)
    assert run.moved_split() == [(30, 0)]


@pytest.mark.parametrize(
    ("new_spec", "label"),
    [
        (make_spec({"steps": [{"weight": 50}]}), "step 0"),  # step 1 no longer exists
        (MANUAL, "manual"),  # the strategy was removed
    ],
)
def test_a_stage_that_no_longer_exists_restarts_from_the_first_stage(new_spec, label):
    run = Run(STEPS_ONLY).to_step(1)
    run.spec = new_spec
    run.after(5)
    assert run.state.label() == label
    assert "spec" in run.state.reason


def test_a_strategy_added_to_a_manual_rollout_starts_it():
    run = Run(MANUAL)
    run.spec = SPEC
    run.after(5)
    assert (run.state.phase, run.state.weight, run.state.shadow_percent) == (Phase.SHADOW, 0, 100)
