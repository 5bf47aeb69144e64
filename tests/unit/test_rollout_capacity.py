"""Replicas from the split, and the machine waiting for the candidate's pods (fake clock)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from gateway.rollout.capacity import (
    CapacityPlan,
    Pods,
    capacity_view,
    gate,
    parse_settings,
    per_million_tokens,
    recent_weights,
    replicas_for,
    segments,
    targets,
    upcoming_weight,
    warming,
)
from gateway.rollout.machine import initial_state, step
from gateway.rollout.rollout_state import Alert, CapacityGate, Command, Phase
from gateway.rollout.throughput import TokenRates
from gateway.spec.model import Routing
from graystack.cli import main
from tests.unit.test_rollout_machine import MANUAL, SPEC, STEPS_ONLY, failing, interval

SETTINGS = parse_settings(
    '{"fleetReplicas": 8, "readyTimeout": "10m", "variants": {'
    '"baseline": {"deployment": "gs-baseline", "minReplicas": 1},'
    '"zero-layer": {"deployment": "gs-zero-layer", "minReplicas": 1, "maxReplicas": 6, "hpa": "gs-zl"}}}'
)
READY = CapacityGate(True, "2 ready zero-layer pods for 2 wanted", 600.0)
WAITING = CapacityGate(False, "waiting for 2 ready zero-layer pods, 1 ready", 600.0)


def test_settings_read_the_charts_camel_case_and_refuse_what_cannot_hold():
    assert SETTINGS.ready_timeout == 600.0
    assert SETTINGS.variants["zero-layer"].hpa == "gs-zl"
    assert SETTINGS.variants["baseline"].max_replicas is None
    for bad, named in [
        ('{"fleetReplicas": 0, "variants": {}}', "fleetReplicas"),
        (
            '{"fleetReplicas": 8, "variants": {"b": {"deployment": "d", "minReplicas": 3, "maxReplicas": 2}}}',
            "below",
        ),
        ('{"fleetReplicas": 8, "variants": {"b": {"deployment": "d", "replicas": 3}}}', "replicas"),
        ('{"fleetReplicas": 8, "readyTimeout": "soon", "variants": {}}', "readyTimeout"),
        ('{"fleetReplicas": 8, "segments": {"m": 101}, "variants": {}}', "'m' carries 101%"),
        ('{"fleetReplicas": 8, "segments": {"m": 60, "h": 50}, "variants": {}}', "add up to 110%"),
    ]:
        with pytest.raises(ValidationError, match=named):
            parse_settings(bad)


@pytest.mark.parametrize(
    ("percent", "replicas"),
    [(0, 1), (5, 1), (20, 2), (30, 3), (95, 8), (100, 8)],  # 30 % of 10 is 3, never 4 by float error
)
def test_replicas_are_the_ceiling_of_the_share_within_the_bounds(percent, replicas):
    variant = SETTINGS.variants["baseline"]
    assert replicas_for(percent, 8 if percent != 30 else 10, variant) == replicas


def test_the_maximum_caps_and_the_minimum_floors():
    capped = SETTINGS.variants["zero-layer"]  # maxReplicas 6
    assert replicas_for(100, 8, capped) == 6
    floored = SETTINGS.variants["baseline"].model_copy(update={"min_replicas": 3})
    assert replicas_for(5, 8, floored) == 3


def test_the_candidate_is_sized_for_the_next_step_the_baseline_for_the_current_split():
    state = initial_state(STEPS_ONLY, 0.0)  # step 0 at 5 %, next 20 %
    assert upcoming_weight(STEPS_ONLY, state) == 20
    wanted = targets(SETTINGS, {"baseline": 95, "zero-layer": 5}, "zero-layer", 20)
    assert wanted == {"baseline": 8, "zero-layer": 2}
    # in shadow, mirrored requests are the candidate's load; the next stage is step 0
    shadow = initial_state(SPEC, 0.0)
    assert upcoming_weight(SPEC, shadow) == 5
    assert targets(SETTINGS, {"baseline": 100}, "zero-layer", 5, shadow_percent=100)["zero-layer"] == 6


def test_the_next_steps_pods_start_only_near_the_end_of_the_hold():
    state = initial_state(STEPS_ONLY, 0.0)  # step 0 holds 600 s
    assert not warming(STEPS_ONLY, state, 299.0, 300.0)
    assert warming(STEPS_ONLY, state, 300.0, 300.0)
    assert not warming(STEPS_ONLY, state, 599.0, 0.0)  # warmup 0: only once the hold is over
    paused, _ = step(STEPS_ONLY, state, None, Command.PAUSE, 100.0)
    assert not warming(STEPS_ONLY, paused, 5000.0, 300.0)  # a pause stops the hold, and the warmup
    promoted = state
    for now in (1.0, 2.0, 3.0):  # to step 1, step 2, past the last step
        promoted, _ = step(STEPS_ONLY, promoted, None, Command.PROMOTE, now)
    assert promoted.phase == Phase.PROMOTED
    assert not warming(STEPS_ONLY, promoted, 5000.0, 300.0)


def test_where_nothing_advances_the_next_weight_is_the_current_one():
    manual = initial_state(MANUAL, 0.0)
    assert upcoming_weight(MANUAL, manual) == 0
    state, _ = step(STEPS_ONLY, initial_state(STEPS_ONLY, 0.0), None, Command.ROLLBACK, 1.0)
    assert (state.phase, upcoming_weight(STEPS_ONLY, state)) == (Phase.ROLLED_BACK, 0)


def test_the_gate_says_how_many_pods_it_waits_for():
    assert gate("zero-layer", 3, 3, 600.0).ready
    shut = gate("zero-layer", 3, 1, 600.0)
    assert (shut.ready, shut.reason) == (False, "waiting for 3 ready zero-layer pods, 1 ready")
    broken = gate("zero-layer", 3, None, 600.0, "403: deployments/scale is forbidden")
    assert not broken.ready
    assert "403" in broken.reason


# --- the machine --------------------------------------------------------------------------------


def to_hold_end():
    """Step 0 (5 %) and the time its 10 min hold is over: with every check passing, about to advance."""
    return initial_state(STEPS_ONLY, 0.0), 600.0


def test_a_step_holds_until_the_candidates_pods_are_ready_and_says_why():
    state, now = to_hold_end()
    state, actions = step(STEPS_ONLY, state, interval(), None, now, WAITING)
    assert (state.step, state.weight) == (0, 5)
    decision = actions[0]
    assert (
        decision.outcome.sentence
        == "hold: capacity: waiting for 2 ready zero-layer pods, 1 ready (0s of 600s)"
    )
    state, actions = step(STEPS_ONLY, state, interval(), None, now + 200, WAITING)
    assert actions[0].outcome.sentence.endswith("(200s of 600s)")
    state, _ = step(STEPS_ONLY, state, interval(), None, now + 205, READY)
    assert (state.step, state.weight, state.capacity_since) == (1, 20, None)


def test_pods_that_never_come_freeze_the_step_with_one_alert_and_never_advance():
    state, now = to_hold_end()
    state, _ = step(STEPS_ONLY, state, interval(), None, now, WAITING)
    state, actions = step(STEPS_ONLY, state, interval(), None, now + 600, WAITING)
    alerts = [a.message for a in actions if isinstance(a, Alert)]
    assert alerts == ["capacity not ready after 600s: waiting for 2 ready zero-layer pods, 1 ready; "
                      "weights frozen at 5%"]  # fmt: skip
    assert (state.step, state.weight, state.paused) == (0, 5, True)
    state, actions = step(STEPS_ONLY, state, interval(), None, now + 900, READY)
    assert (state.step, state.paused) == (0, True)  # an alerted rollout does not move again unseen
    assert not [a for a in actions if isinstance(a, Alert)]
    # resumed, it waits afresh (a new timeout), and advances once the pods are there
    state, _ = step(STEPS_ONLY, state, None, Command.RESUME, now + 910)
    state, _ = step(STEPS_ONLY, state, interval(), None, now + 920, WAITING)
    assert (state.step, state.paused, state.capacity_since) == (0, False, now + 920)
    state, _ = step(STEPS_ONLY, state, interval(), None, now + 930, READY)
    assert state.step == 1


def test_a_rollback_is_never_gated_by_capacity():
    state, now = to_hold_end()
    state, _ = step(STEPS_ONLY, state, interval(), None, now, WAITING)
    state, _ = step(STEPS_ONLY, state, failing(), None, now + 5, WAITING)
    assert (state.phase, state.weight) == (Phase.ROLLED_BACK, 0)


def test_after_a_rollback_the_baseline_is_sized_for_all_the_traffic_at_once():
    state, _ = step(STEPS_ONLY, initial_state(STEPS_ONLY, 0.0), failing(), None, 60.0)
    assert state.phase == Phase.ROLLED_BACK
    recent = recent_weights(STEPS_ONLY, state, 61.0, SETTINGS.scale_down_delay)
    wanted = targets(SETTINGS, {"baseline": 100, "zero-layer": 0}, "zero-layer", 0, 0, "baseline", recent)
    assert wanted == {"baseline": 8, "zero-layer": 1}


def test_the_baseline_keeps_the_size_of_a_stage_left_within_the_delay_and_no_longer():
    state = initial_state(STEPS_ONLY, 0.0)  # step 0 at 5 %, holds 10m, then 20 %
    state, _ = step(STEPS_ONLY, state, interval(), None, 601.0)
    assert state.weight == 20
    split = {"baseline": 80, "zero-layer": 20}
    for now, baseline in ((602.0, 8), (601.0 + SETTINGS.scale_down_delay + 1, 7)):
        recent = recent_weights(STEPS_ONLY, state, now, SETTINGS.scale_down_delay)
        assert targets(SETTINGS, split, "zero-layer", 20, 0, "baseline", recent)["baseline"] == baseline


def test_the_wait_survives_a_restart_in_the_saved_state():
    state, now = to_hold_end()
    state, _ = step(STEPS_ONLY, state, interval(), None, now, WAITING)
    restored = type(state).from_dict(state.to_dict())
    assert restored.capacity_since == now
    assert "capacity_since" not in initial_state(STEPS_ONLY, 0.0).to_dict()  # off: the format of before
    restored, actions = step(STEPS_ONLY, restored, interval(), None, now + 600, WAITING)
    assert restored.paused
    assert any(isinstance(a, Alert) for a in actions)


def test_kube_gateway_refuses_bad_capacity_settings_before_it_touches_the_cluster():
    args = ["kube-gateway", "--namespace", "llm", "--spec-configmap", "s", "--state-configmap", "t"]
    args += ["--lease", "l", "--identity", "gateway-0", "--kubeconfig", "/nonexistent"]
    env = {"GRAYSTACK_CAPACITY": '{"fleetReplicas": 0, "variants": {}}'}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 2
    assert "Invalid value for --capacity" in result.output
    assert "fleetReplicas" in result.output


def test_the_view_says_what_ready_pods_can_take_and_what_running_pods_cost():
    priced = SETTINGS.model_copy(update={"gpu_hour_price": 2.5})
    plan = CapacityPlan({"baseline": 8, "zero-layer": 1}, candidate_needs=1)
    pods = {"baseline": Pods(running=3, ready=2), "zero-layer": Pods(running=8, ready=8)}
    view = capacity_view(priced, plan, pods, {"baseline": 100, "zero-layer": 0}, "zero-layer", {})
    assert view["variants"]["baseline"] == {
        "wanted": 8, "share": 100, "running": 3, "ready": 2, "ready_share": 25, "cost_per_hour": 7.5,
    }  # fmt: skip
    assert view["variants"]["zero-layer"]["ready_share"] == 100  # more pods than the fleet: all of it
    assert (view["next_stage_needs"], view["candidate_ready"]) == (1, 8)

    unseen = capacity_view(SETTINGS, plan, {}, {"baseline": 100}, "zero-layer", {"zero-layer": "403: no"})
    assert unseen["variants"]["zero-layer"] == {"wanted": 1, "share": 0}  # no price, no pods counted
    assert (unseen["candidate_ready"], unseen["problems"]) == (None, {"zero-layer": "403: no"})


def test_tokens_per_second_over_the_last_looks_price_a_million_tokens():
    rates = TokenRates().add(0, {"baseline": 123}).add(10, {"baseline": 5000}).add(20, {"baseline": 5000})
    assert rates.per_second() == {"baseline": 500.0}  # the first look's tokens came before it: not counted
    assert TokenRates().add(0, {"baseline": 9}).per_second() == {}  # one look spans no time
    assert rates.add(320, {"baseline": 0}).per_second() == {"baseline": 0.0}  # older looks left the window

    view = {"variants": {"baseline": {"cost_per_hour": 3.6}, "zero-layer": {"cost_per_hour": 3.6}, "c": {}}}
    priced = per_million_tokens(view, {"baseline": 1000.0, "zero-layer": 0.0, "c": 5.0})["variants"]
    assert priced["baseline"]["cost_per_million_tokens"] == pytest.approx(1.0)  # 3.6 M tokens for 3.6 an hour
    assert "cost_per_million_tokens" not in priced["zero-layer"]  # nothing generated: no price per token
    assert priced["c"] == {}  # no GPU-hour price


CHART_RULES = Routing.model_validate(  # the chart's default rules
    {
        "weights": {"baseline": 95, "zero-layer": 5},
        "rules": [
            {"value": "high_load", "variant": "zero-layer"},
            {"value": "mobile", "weights": {"baseline": 80, "zero-layer": 20}},
        ],
    }
)


def test_a_segment_pinned_to_the_candidate_is_its_load_at_every_stage():
    mix = segments(CHART_RULES, {"high_load": 20, "mobile": 20})  # the locustfile's default mix
    assert mix.share("zero-layer", 5) == 27  # 60 % x 5 % + 20 % + 20 % x 20 %
    assert mix.share("baseline", 95) == 73
    assert mix.share("zero-layer", 100) == 84  # promoted: mobile's 80 % stays on the baseline
    assert mix.note() == ""
    split = {"baseline": 95, "zero-layer": 5}
    assert targets(SETTINGS, split, "zero-layer", 5, load=mix) == {"baseline": 6, "zero-layer": 3}
    assert targets(SETTINGS, split, "zero-layer", 5) == {"baseline": 8, "zero-layer": 1}  # the split alone

    unstated = segments(CHART_RULES, {"high_load": 20, "gold": 5})
    assert unstated.share("zero-layer", 5) == 24  # mobile's traffic is taken to follow the default split
    assert unstated.note() == (
        "mobile: no share of the traffic stated, sized as if it followed the default split; "
        "gold: no rule routes it, its share follows the default split"
    )
