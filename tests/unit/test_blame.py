"""Whose errors they are: a shared incident is told from the candidate's own failure by comparing the two
variants' errors at equal exposure (gateway/rollout/checks/errors.py, `blame`), not by which threshold
test fires first. The guarantees are simulated through the shipped kernels and rule
(bench/shipped_rules.ErrorTests, shown below to decide as the check does, look by look); the decisions
through the check and the look the controller runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.shipped_rules import ErrorTests, seed_plan, seed_spec
from gateway.rollout.checks.base import Moment
from gateway.rollout.checks.common import fired
from gateway.rollout.checks.errors import Blame, ErrorRate, ErrorSettings, whose
from gateway.rollout.checks.errors import ErrorTests as Record
from gateway.rollout.increments import VariantLook
from gateway.rollout.plan import Plan, plan_for
from gateway.rollout.rollout_state import Alert, Phase
from gateway.rollout.sequential import RatioTest
from gateway.rollout.verdicts import Verdict
from gateway.spec.model import validate_spec
from tests.support.counting_provider import Traffic
from tests.unit.test_rollout_analysis import checks, run, spec
from tests.unit.test_rollout_look import Run
from tests.unit.test_rollout_look import spec as look_spec

HEALTHY, WARM, INCIDENT = 0.001, 60, 120  # healthy looks, then looks of the incident


def slack(alpha: float, runs: int) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def budget_plan(budget: float) -> Plan:
    """The seed's plan (a look every 5 s, max_error_rate 0.3 %) with `budget` split over its tests."""
    return plan_for(validate_spec(seed_spec(analysis={"false_rollback_budget": budget})))


def traffic(weight: float, rates: tuple[np.ndarray, np.ndarray], rps: float, runs: int, seed: int):
    """(cand_n, cand_x, base_n, base_x) per run and look: Poisson requests split at `weight` %, binomial
    errors at each look's rate per variant, 5 s looks."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rps * 5.0, (runs, len(rates[0])))
    cand_n = rng.binomial(n, weight / 100)
    base_n = n - cand_n
    return cand_n, rng.binomial(cand_n, rates[0]), base_n, rng.binomial(base_n, rates[1])


def simulate(
    plan: Plan, weight: float, rates: tuple[np.ndarray, np.ndarray], rps: float, runs: int, seed: int
):
    """(candidate's test fired, whose, error_ratio fired) per run and look, for `traffic`."""
    found = ErrorTests(plan, runs).judged(*traffic(weight, rates, rps, runs, seed))
    return found.failing, found.whose, found.ratio


def incident(peak: float) -> np.ndarray:
    """Healthy, then a shared incident that swings between a fifth of `peak` and `peak`."""
    swing = peak * (0.6 + 0.4 * np.sin(np.arange(INCIDENT) / 7))
    return np.concatenate([np.full(WARM, HEALTHY), swing])


@pytest.mark.parametrize("weight", [5, 20, 50])
def test_a_shared_incident_is_blamed_on_the_candidate_at_most_alpha_of_the_time(weight):
    """Both variants fail alike (a rate that swings through the incident): the candidate is blamed at
    any look in at most alpha of the incidents, where which test fires first blamed it in up to half;
    and the incident is told as shared (the threshold still guards) in nearly all."""
    plan, runs = budget_plan(0.25), 1000  # alpha 5 % per test: a level 1,000 runs can check
    rates = incident(0.02)
    failing, found, ratio = simulate(plan, weight, (rates, rates), 80, runs, seed=weight)
    blamed = ((failing & (found == Blame.CANDIDATE)) | ratio).any(axis=1)
    assert blamed.mean() <= slack(plan.alpha, runs)
    assert (failing & (found == Blame.SHARED)).any(axis=1).mean() >= 0.95
    # the same incidents as a race (a failure called the candidate's when its test fires first)
    found = ErrorTests(plan, runs).judged(*traffic(weight, (rates, rates), 80, runs, seed=weight))
    ours, theirs = found.failing, found.baseline_failing
    first = (ours | theirs).argmax(axis=1)
    raced = ours[np.arange(runs), first] & ~theirs[np.arange(runs), first]
    if weight == 50:
        assert raced.mean() > 0.2


@pytest.mark.parametrize(("weight", "extra"), [(5, 0.01), (50, 0.01), (5, 0.05), (50, 0.05)])
def test_a_candidate_worse_than_the_baseline_is_blamed_and_rolled_back(weight, extra):
    """A candidate-only regression (+1 or +5 points of errors over a healthy baseline) at the seed's
    levels: told as the candidate's, never as shared, in every run within two hours."""
    plan, runs = seed_plan(), 400
    looks = 1440
    base = np.full(looks, HEALTHY)
    failing, found, ratio = simulate(plan, weight, (base + extra, base), 80, runs, seed=7)
    rolled = (failing & (found != Blame.UNTOLD)) | ratio
    assert rolled.any(axis=1).all()
    first = rolled.argmax(axis=1)
    assert not (found[np.arange(runs), first] == Blame.SHARED).any()


def test_a_worse_candidate_during_a_shared_incident_is_still_blamed():
    """Both fail, the candidate at twice the baseline's rate: the comparison tells it apart."""
    plan, runs = seed_plan(), 400
    rates = incident(0.02)
    failing, found, _ = simulate(plan, 20, (2 * rates, rates), 80, runs, seed=8)
    assert (failing & (found == Blame.CANDIDATE)).any(axis=1).mean() >= 0.99


def test_the_simulation_decides_as_the_check_does_look_by_look():
    """bench/shipped_rules.ErrorTests (every run at once) against the check the controller runs, one look
    at a time: the same firing and the same blame at every look, through an incident and a regression."""
    plan, runs, looks = budget_plan(0.25), 6, 150
    rng = np.random.default_rng(11)
    cand_rate = np.concatenate([np.full(40, HEALTHY), np.full(50, 0.03), np.full(60, 0.01)])
    base_rate = np.concatenate([np.full(40, HEALTHY), np.full(50, 0.03), np.full(60, HEALTHY)])
    n = rng.poisson(60, (runs, looks))
    cand_n = rng.binomial(n, 0.5)
    cand_n[:, 100:110] = n[:, 100:110]  # ten looks with no baseline traffic
    base_n = n - cand_n
    cand_x, base_x = rng.binomial(cand_n, cand_rate), rng.binomial(base_n, base_rate)
    simulated = ErrorTests(plan, runs)
    failing, _, found, _ = simulated.judged(cand_n, cand_x, base_n, base_x)
    row, settings = ErrorRate(), ErrorSettings(plan.max_error_rate)
    for r in range(runs):
        tests = row.start(settings)
        for j in range(looks):
            ours = VariantLook(int(cand_n[r, j]), int(cand_x[r, j]))
            theirs = VariantLook(int(base_n[r, j]), int(base_x[r, j]))
            tests = row.add(tests, settings, plan, ours, theirs)
            candidate = tests.candidate
            fires = fired(candidate.log_evalue, plan.log_bound) or fired(
                candidate.log_detector, plan.log_detector_bound
            )
            assert (fires, whose(tests, plan)) == (failing[r, j], found[r, j]), (r, j)
        assert tests.blame is not None
        assert tests.blame.log_lr == pytest.approx(tuple(simulated.comparison.log_lr[r]), abs=1e-9)
        assert tests.blame.log_sr == pytest.approx(tuple(simulated.comparison.log_sr[r]), abs=1e-9)
    assert {Blame.SHARED, Blame.CANDIDATE} <= set(found[failing].tolist())


def test_r1s_detector_is_the_shiryaev_roberts_recursion_of_its_per_look_factors():
    """R = (R + 1) * LR at each look that compared anything (R = LR at the first), averaged over the
    alternatives; a look with no compared stratum is no step."""
    looks = [[(50, 2, 950, 3)], [(0, 0, 40, 1)], [(200, 4, 800, 2)], [(100, 0, 100, 0)]]
    compared = [True, False, True, True]  # the second look's only stratum has no candidate requests
    test, r = RatioTest.new(1.0), None
    for strata, step in zip(looks, compared, strict=True):
        before = np.asarray(test.log_lr)
        test = test.update(strata)
        if step:
            factor = np.exp(np.asarray(test.log_lr) - before)
            r = factor if r is None else (r + 1) * factor
    assert test.steps == 3
    assert math.exp(test.log_detector) == pytest.approx(float(np.mean(r)), rel=1e-9)
    assert RatioTest.new().log_detector == -math.inf


# --- the check's verdicts ------------------------------------------------------------------------

RACE = [{"baseline": Traffic(2000, 14), "zero-layer": Traffic(2000, 20)}]  # the candidate's test first


def test_a_candidate_ahead_in_the_race_holds_until_told_then_the_incident_is_shared():
    rollout = spec()
    error_rate = checks(rollout, run(plan_for(rollout), RACE))["error_rate"]
    assert error_rate.log_evalue >= error_rate.log_bound  # the candidate's own test fired ...
    assert error_rate.verdict == Verdict.INCONCLUSIVE  # ... which once rolled it back: now it holds
    assert "holding until told whose" in error_rate.reason
    both = [*RACE, {"baseline": Traffic(2000, 20), "zero-layer": Traffic(2000, 20)}]
    error_rate = checks(rollout, run(plan_for(rollout), both))["error_rate"]
    assert (error_rate.verdict, error_rate.shared) == (Verdict.FAIL, True)
    assert "not shown above the baseline's" in error_rate.reason


def test_with_header_rules_there_is_no_comparison_and_the_baselines_own_test_tells():
    """Header rules route segments apart and Envoy's counters mix them: the variants' error rates are
    rates of different traffic, so the failure is shared only if the baseline's own test fired (as
    error_ratio, the other comparison, is off there)."""
    rollout = spec(rules=True)
    error_rate = checks(rollout, run(plan_for(rollout), RACE))["error_rate"]
    assert (error_rate.verdict, error_rate.shared) == (Verdict.FAIL, False)
    assert "not compared" in error_rate.reason


def test_a_candidate_failing_alone_is_its_own_failure():
    rollout = spec()
    looks = [{"baseline": Traffic(2000, 2), "zero-layer": Traffic(2000, 30)}]
    error_rate = checks(rollout, run(plan_for(rollout), looks))["error_rate"]
    assert (error_rate.verdict, error_rate.shared) == (Verdict.FAIL, False)
    assert "above the baseline's, the comparison at equal exposure" in error_rate.reason


def test_with_no_baseline_traffic_the_threshold_alone_decides():
    """At 100 % (promoted) there is nothing to compare with: the guard must still roll back."""
    rollout = spec()
    looks = [
        {"baseline": Traffic(2000, 2), "zero-layer": Traffic(2000, 2)},
        {"zero-layer": Traffic(2000, 40)},
    ]
    error_rate = checks(rollout, run(plan_for(rollout), looks))["error_rate"]
    assert (error_rate.verdict, error_rate.shared) == (Verdict.FAIL, False)
    assert "the baseline had no traffic to compare with" in error_rate.reason


def test_a_record_saved_before_the_comparison_resumes_and_starts_it():
    """An error check's record saved by a gateway before the comparison (no `blame`, no `alone`) is read,
    keeps its threshold tests, and starts the comparison at its next look."""
    plan = plan_for(spec())
    row, settings = ErrorRate(), ErrorSettings(plan.max_error_rate)
    tests = row.add(row.start(settings), settings, plan, VariantLook(400, 1), VariantLook(400, 1))
    saved = Record(tests.candidate, tests.baseline, tests.bounds)
    assert saved.blame is None
    resumed = row.add(saved, settings, plan, VariantLook(100, 1), VariantLook(100, 0))
    assert resumed.candidate == tests.candidate.update(100, 1)
    assert resumed.blame == RatioTest.new(1.0).update([(100, 1, 100, 0)])
    [rate, change] = row.verdicts(resumed, settings, plan, Moment(advancing=False))
    assert (rate.verdict, change.verdict) == (Verdict.PASS, Verdict.PASS)


# --- the machine's decisions ---------------------------------------------------------------------


def even_split(**analysis):
    rollout = look_spec(**analysis)
    data = rollout.model_dump(mode="json", exclude_none=True)
    data["strategy"]["steps"][0]["weight"] = 50
    data["routing"]["rules"] = []  # every request split at random: the variants are compared
    return validate_spec(data)


def test_at_an_even_split_a_race_the_candidate_leads_is_held_then_told_as_shared():
    run_ = Run(even_split(on_shared_incident="hold"))
    run_.after(1, {"baseline": Traffic(100), "zero-layer": Traffic(100)})
    for look in RACE:
        run_.after(1, look)
    assert run_.state.phase == Phase.PROGRESSING  # held, not yet told
    assert not run_.rolled_back()
    run_.after(1, {"baseline": Traffic(2000, 30), "zero-layer": Traffic(2000, 20)})
    assert not run_.rolled_back()
    assert (run_.state.phase, run_.state.paused) == (Phase.PROGRESSING, True)
    assert run_.state.incident is not None
    assert any(
        "shared incident" in a.message for done in run_.looks for a in done.actions if isinstance(a, Alert)
    )


def test_at_an_even_split_a_candidate_failing_alone_is_rolled_back():
    run_ = Run(even_split(on_shared_incident="hold"))
    run_.after(1, {"baseline": Traffic(100), "zero-layer": Traffic(100)})
    run_.after(1, {"baseline": Traffic(2000, 2), "zero-layer": Traffic(2000, 30)})
    assert run_.rolled_back() == ["error_rate"]
