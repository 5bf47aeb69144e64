"""The length_cut check (analysis.quality.max_cut_ratio): a candidate whose answers run into the clients'
token limit more often than the baseline's is rolled back, though every answer still parses; one cut as
often as the baseline (clients with low limits cut both) passes. Off unless asked for, and then the
plan, its budget and its key are what they were without it."""

from __future__ import annotations

from bench.shipped_rules import seed_spec
from gateway.metrics.observations import CUT, REQUESTS, STRUCTURED, CounterKey, Observations
from gateway.names import DEFAULT_SEGMENT
from gateway.rollout import evidence as tests
from gateway.rollout.analysis import Verdict, analyse, by_name
from gateway.rollout.checks.base import Moment
from gateway.rollout.checks.length_cut import LENGTH_CUT
from gateway.rollout.increments import VariantLook
from gateway.rollout.look import Carried, look
from gateway.rollout.machine import initial_state
from gateway.rollout.plan import plan_for
from gateway.rollout.rollout_state import Phase
from gateway.spec.model import validate_spec


def spec(**quality: object):
    return validate_spec(seed_spec(analysis={"quality": {"capture_percent": 10, **quality}}))


def cut_look(cut: int, baseline_cut: int = 60) -> dict[str, VariantLook]:
    """200 checked answers each, `cut` of the candidate's and `baseline_cut` of the baseline's cut."""
    return {
        "zero-layer": VariantLook(requests=200, structure={DEFAULT_SEGMENT: (200, 0, cut)}),
        "baseline": VariantLook(requests=200, structure={DEFAULT_SEGMENT: (200, 0, baseline_cut)}),
    }


def test_off_unless_asked_for_and_then_the_plan_is_as_before():
    without, asked = plan_for(spec()), plan_for(spec(max_cut_ratio=1.5))
    assert LENGTH_CUT not in without.tests
    assert dict(without.off)[LENGTH_CUT] == "analysis.quality.max_cut_ratio is null"
    assert LENGTH_CUT in asked.tests
    assert asked.alpha == without.alpha * len(without.tests) / len(
        asked.tests
    )  # one more share of the budget
    assert without.key == plan_for(spec(max_cut_ratio=None)).key != asked.key


def test_answers_cut_three_times_as_often_fail_and_cut_as_often_pass():
    plan = plan_for(spec(max_cut_ratio=1.5))
    for cut, verdict in ((60, Verdict.PASS), (180, Verdict.FAIL)):
        evidence = tests.start(plan, "5%", 0.0)
        for _ in range(5):
            evidence = tests.add_look(evidence, plan, cut_look(cut), "5%")
        check = by_name(analyse(plan, evidence, Moment()))[LENGTH_CUT]
        assert check.verdict == verdict, check.reason
        assert f"{5 * cut} of 1000 candidate answers cut against 300 of 1000" in check.reason
        assert check.value == cut / 60


def test_with_nothing_captured_it_holds_and_without_live_capture_it_reports_in_shadow_only():
    held = plan_for(spec(max_cut_ratio=1.5))
    (check,) = [c for c in analyse(held, tests.start(held, "5%", 0.0), Moment()) if c.name == LENGTH_CUT]
    assert check.verdict == Verdict.INCONCLUSIVE  # a limit nobody checked is no pass
    shadow_only = plan_for(spec(max_cut_ratio=1.5, capture_percent=0))
    evidence = tests.start(shadow_only, "5%", 0.0)
    assert LENGTH_CUT not in by_name(analyse(shadow_only, evidence, Moment()))
    assert LENGTH_CUT in by_name(analyse(shadow_only, evidence, Moment(shadowing=True)))


def counters(n: int, cut_share: float) -> Observations:
    """The quality counters after `n` looks of 200 captured answers per variant, as the gateway counts them
    (gateway/quality/counts.py): the baseline's 30 % cut, the candidate's `cut_share`."""
    found = {}
    for variant, share in (("baseline", 0.3), ("zero-layer", cut_share)):
        found[CounterKey(variant, REQUESTS, source=f"{variant}-rq")] = 200.0 * n
        found[CounterKey(variant, STRUCTURED, DEFAULT_SEGMENT, source="quality")] = 200.0 * n
        found[CounterKey(variant, CUT, DEFAULT_SEGMENT, source="quality")] = float(round(200 * share) * n)
    return Observations(counters=found)


def after_looks(cut_share: float, looks: int = 30) -> tuple[Phase, str]:
    """The rollout's phase and reason after `looks` looks (or its rollback) through the pure look."""
    rollout = spec(max_cut_ratio=1.5)
    state, carried = initial_state(rollout, 0.0), Carried(proxy_seen=True)
    for n in range(looks):
        done = look(rollout, state, carried, 10.0 * n, seen=counters(n, cut_share))
        state, carried = done.state, done.carried
        if state.phase == Phase.ROLLED_BACK:
            break
    return state.phase, state.reason


def test_a_rambling_candidate_is_rolled_back_by_the_looks_the_controller_takes():
    phase, reason = after_looks(cut_share=0.9)
    assert phase == Phase.ROLLED_BACK
    assert LENGTH_CUT in reason
    assert after_looks(cut_share=0.3)[0] != Phase.ROLLED_BACK  # cut as often as the baseline: no rollback
