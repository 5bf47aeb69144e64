"""The evidence gate's statistics against closed forms, and their validity by simulation (small, fast)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from gateway.rollout.evidence import add_look, start
from gateway.rollout.machine import initial_state
from gateway.rollout.not_worse import below_log_evalue, judge
from gateway.rollout.plan import plan_for
from gateway.rollout.rollout_state import RolloutState
from gateway.rollout.sequential import (
    NotSlowerTest,
    beta_binomial_log_lr,
    error_rate_bounds,
    faster_ranks,
    pooled_ranks,
)
from gateway.rollout.sequential.exact import BET_SIZES
from tests.unit.test_rollout_exact_latency import STAGE, looks, spec


def test_the_ranks_are_the_shift_tests_counted_from_the_slow_end():
    rng = np.random.default_rng(1)
    candidate, baseline = rng.lognormal(0, 0.5, 7), rng.lognormal(0, 0.5, 11)
    up = np.sort(pooled_ranks(candidate, baseline, 0.1))
    down = np.sort(faster_ranks(candidate, baseline, 0.1))
    assert down.tolist() == sorted((len(candidate) + len(baseline) + 1 - up).tolist())


def test_a_tie_ranks_the_candidate_as_the_slower():
    # 1.1 / 1.1 ties the baseline's 1.0: the candidate counts as slower (rank 1 from the slow end)
    assert faster_ranks(np.array([1.1]), np.array([1.0]), 0.1).tolist() == [1]
    assert faster_ranks(np.array([1.0]), np.array([1.0]), 0.1).tolist() == [2]


def test_one_look_is_the_rank_sums_exponential_tilt():
    # one candidate faster than one baseline value: rank 2 of N = 2, score u = 2/3; the factor is
    # exp(lambda u) / mean(exp(lambda r/3), r = 1, 2), per bet lambda
    test = NotSlowerTest.new(0.1).update([([1.0], [2.0])])
    expected = [b * 2 / 3 - math.log((math.exp(b / 3) + math.exp(2 * b / 3)) / 2) for b in BET_SIZES]
    assert test.log_lr[: len(BET_SIZES)] == pytest.approx(expected)
    assert (test.candidate_requests, test.baseline_requests, test.looks) == (1, 1, 1)


def test_at_the_margins_boundary_it_rarely_reaches_its_bound():
    """Candidate exactly (1+m) x the baseline in distribution: the null's edge, where it is spent."""
    rng, runs, alpha = np.random.default_rng(3), 200, 0.1
    crossed = 0
    for _ in range(runs):
        test = NotSlowerTest.new(0.1)
        for _ in range(20):
            base = rng.lognormal(0, 0.6, 12)
            test = test.update([(1.1 * rng.lognormal(0, 0.6, 3), base)])
            if test.log_evalue >= math.log(1 / alpha):
                crossed += 1
                break
    assert crossed / runs <= alpha


def test_an_equal_candidate_is_shown_not_slower_and_a_slower_one_is_not():
    rng = np.random.default_rng(4)
    equal, slower = NotSlowerTest.new(0.1), NotSlowerTest.new(0.1)
    for _ in range(150):  # 1500 candidate answers: a 10 % margin is 0.16 sigma of this TTFT's log
        base = rng.lognormal(0, 0.6, 40)
        equal = equal.update([(rng.lognormal(0, 0.6, 10), base)])
        slower = slower.update([(1.3 * rng.lognormal(0, 0.6, 10), base)])
    assert equal.log_evalue > math.log(1 / 0.002)
    assert slower.log_evalue < 0


@pytest.mark.parametrize(("events", "requests"), [(0, 100), (0, 3000), (2, 5000), (30, 5000)])
def test_the_errors_part_is_the_confidence_sequence_lying_below_the_rate(events, requests):
    most, alpha = 0.003, 0.002
    value = float(below_log_evalue(np.asarray(events), np.asarray(requests), most))
    below = events < most * requests
    assert value == (pytest.approx(beta_binomial_log_lr(events, requests, most, most)) if below else 0.0)
    _, upper = error_rate_bounds(events, requests, alpha, most)
    assert (value >= math.log(1 / alpha)) == (upper < most)


def test_the_gates_tests_are_saved_with_the_rollout_and_judged_from_them():
    data = spec().model_dump(mode="python")
    data["strategy"]["steps"][1]["approval"] = "evidence"
    rollout = type(spec()).model_validate(data)
    plan, rng = plan_for(rollout), np.random.default_rng(5)
    evidence = start(plan, STAGE, 0.0)
    for _ in range(30):
        evidence = add_look(evidence, plan, looks(1.0, 40, rng), STAGE)
    state = replace(initial_state(rollout, 0.0), evidence=evidence)
    assert RolloutState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    judgement = judge(plan, evidence.not_worse, evidence.tests["error_rate"].candidate)
    assert judgement is not None
    assert [(p.name, p.samples) for p in judgement.parts] == [("ttft", 1200), ("itl", 1200), ("errors", 1200)]
    assert judgement.parts[0].shown
    assert not judgement.parts[2].shown  # 1200 error-free requests do not yet show a rate below 0.3 %
