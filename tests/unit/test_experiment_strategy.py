"""strategy: experiment: the spec refuses bad input with the field named; the pure machine holds the
split until the duration or a decision (a fake clock: plain floats); the experiment row keeps its counts
through the evidence and the saved state."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from gateway.rollout import evidence as tests
from gateway.rollout.analysis import Check, Verdict, analyse
from gateway.rollout.capacity import recent_weights
from gateway.rollout.checks.base import Moment
from gateway.rollout.checks.experiment import EXPERIMENT, ExperimentTests
from gateway.rollout.increments import VariantLook
from gateway.rollout.machine import initial_state, step
from gateway.rollout.outcome import Reason
from gateway.rollout.plan import plan_for
from gateway.rollout.rollout_state import Command, Phase, RecordDecision, RolloutState
from gateway.rollout.views import rollout_split
from gateway.spec.model import Mirror, RolloutSpec, SpecError, validate_spec
from tests.unit.test_rollout_reasons import told

EXPERIMENT_5050 = {"weights": {"baseline": 50, "zero-layer": 50}, "duration": "1h"}


def make_spec(
    strategy: dict[str, Any], variants: tuple[str, ...] = ("baseline", "zero-layer"), **more: Any
) -> RolloutSpec:
    data = {
        "name": "zero-layer",
        "variants": {name: {"endpoints": [f"127.0.0.1:{8001 + i}"]} for i, name in enumerate(variants)},
        "routing": {"weights": {variants[0]: 100}},
        "analysis": {"interval": "5s"},
        "strategy": strategy,
        **more,
    }
    return validate_spec(data)


SPEC = make_spec({"experiment": EXPERIMENT_5050})


@pytest.mark.parametrize(
    ("strategy", "variants", "field"),
    [
        ({"experiment": {"weights": {"baseline": 60, "zero-layer": 50}, "duration": "1h"}}, None,
         "strategy.experiment.weights: weights must sum to 100, got 110"),
        ({"experiment": {"weights": {"baseline": 50, "zero-layer": 50}}}, None,
         "strategy.experiment.duration: Field required"),
        ({"experiment": {"weights": {"zero-layer": 100}, "duration": "1h"}}, None,
         "strategy.experiment.weights: the baseline 'baseline' needs a share above 0"),
        ({"experiment": {"weights": {"a": 50, "b": 50}, "duration": "1h"}}, ("a", "b"),
         "strategy.experiment.weights: an experiment compares with a baseline"),
        ({"experiment": {"weights": {"baseline": 50, "nobody": 50}, "duration": "1h"}}, None,
         "strategy.experiment.weights: unknown variant(s) ['nobody']"),
        ({"experiment": EXPERIMENT_5050, "steps": [{"weight": 5}]}, None,
         "strategy: Value error, experiment: holds one split"),
        ({"experiment": {**EXPERIMENT_5050, "duration": "0s"}}, None, "strategy.experiment.duration"),
        ({}, None, "strategy: Value error, name `steps` (at least one) or an `experiment`"),
    ],
)  # fmt: skip
def test_a_bad_experiment_is_refused_with_the_field_named(
    strategy: dict[str, Any], variants: tuple[str, ...] | None, field: str
) -> None:
    with pytest.raises(SpecError) as refused:
        make_spec(strategy, variants or ("baseline", "zero-layer"))
    assert field.replace("Value error, ", "") in str(refused.value)


def test_an_experiment_of_three_variants_gives_every_candidate_a_share_or_is_refused() -> None:
    three = {"experiment": {"weights": {"baseline": 34, "a": 33, "b": 33}, "duration": "1h"}}
    assert make_spec(three, ("baseline", "a", "b")).lanes == ("a", "b")
    with pytest.raises(SpecError, match=r"give every candidate a share above 0 \(\['b'\] have none\)"):
        make_spec(
            {"experiment": {"weights": {"baseline": 50, "a": 50}, "duration": "1h"}}, ("baseline", "a", "b")
        )


def _checks(experiment: Verdict = Verdict.INCONCLUSIVE, guard: Verdict = Verdict.PASS) -> list[Check]:
    return [
        Check("error_rate", guard, 0.001, 100, None, 0.003, "errors"),
        Check(EXPERIMENT, experiment, None, 100, None, 0.05, "deciding"),
    ]


def _outcome(actions: list[Any]) -> Reason:
    return next(a for a in actions if isinstance(a, RecordDecision)).outcome.reason


def test_the_experiment_holds_its_split_until_its_duration_then_concludes_without_promoting() -> None:
    state = initial_state(SPEC, 0.0)
    assert (state.phase, state.weight) == (Phase.EXPERIMENT, 50)
    assert rollout_split(SPEC, state).weights == {"baseline": 50, "zero-layer": 50}
    state, actions = step(SPEC, state, _checks(Verdict.INCONCLUSIVE), None, 3599.0)
    assert (state.phase, _outcome(actions)) == (Phase.EXPERIMENT, Reason.EXPERIMENT_RUNNING)
    state, actions = step(SPEC, state, _checks(Verdict.INCONCLUSIVE), None, 3600.0)
    assert (state.phase, state.weight, _outcome(actions)) == (
        Phase.CONCLUDED,
        50,
        Reason.EXPERIMENT_CONCLUDED,
    )
    assert state.reason == "experiment concluded: its duration (3600s) elapsed"
    state, actions = step(SPEC, state, _checks(Verdict.PASS), None, 99_999.0)  # never promotes by itself
    assert (state.phase, state.weight, _outcome(actions)) == (Phase.CONCLUDED, 50, Reason.GUARD_ONLY)


def test_an_experiment_mirrors_its_share_to_the_candidate_for_the_pairs_and_keeps_it_once_concluded() -> None:
    assert rollout_split(SPEC, initial_state(SPEC, 0.0)).mirror is None  # mirror_percent 0: no copies
    mirrored = make_spec({"experiment": {**EXPERIMENT_5050, "mirror_percent": 10}})
    state = initial_state(mirrored, 0.0)
    assert rollout_split(mirrored, state).mirror == Mirror(variant="zero-layer", percent=10)
    state, _ = step(mirrored, state, _checks(Verdict.PASS), None, 60.0)
    assert state.phase == Phase.CONCLUDED
    assert rollout_split(mirrored, state).mirror == Mirror(variant="zero-layer", percent=10)
    less = make_spec({"experiment": {**EXPERIMENT_5050, "mirror_percent": 5}})
    state, _ = step(less, state, [], None, 61.0)  # an edit of the share: applied, the phase kept
    assert (state.phase, state.shadow_percent) == (Phase.CONCLUDED, 5)


def test_the_experiment_ends_early_on_a_decision_unless_told_not_to() -> None:
    state, _ = step(SPEC, initial_state(SPEC, 0.0), _checks(Verdict.PASS), None, 60.0)
    assert (state.phase, state.reason) == (Phase.CONCLUDED, "experiment concluded: every difference decided")
    patient = make_spec({"experiment": {**EXPERIMENT_5050, "end_on_decision": False}})
    state, _ = step(patient, initial_state(patient, 0.0), _checks(Verdict.PASS), None, 60.0)
    assert state.phase == Phase.EXPERIMENT


def test_the_guard_still_rolls_back_a_candidate_that_harms_users_in_an_experiment_and_after() -> None:
    state, _ = step(SPEC, initial_state(SPEC, 0.0), _checks(guard=Verdict.FAIL), None, 10.0)
    assert (state.phase, state.weight) == (Phase.ROLLED_BACK, 0)
    concluded, _ = step(SPEC, initial_state(SPEC, 0.0), _checks(Verdict.PASS), None, 10.0)
    state, _ = step(SPEC, concluded, _checks(guard=Verdict.FAIL), None, 20.0)
    assert state.phase == Phase.ROLLED_BACK


def test_a_pause_stops_the_experiment_clock_and_promote_concludes_it() -> None:
    state, _ = step(SPEC, initial_state(SPEC, 0.0), None, Command.PAUSE, 100.0)
    state, _ = step(SPEC, state, _checks(), None, 5000.0)
    assert state.phase == Phase.EXPERIMENT
    assert state.paused
    state, _ = step(SPEC, state, None, Command.RESUME, 5000.0)
    state, _ = step(SPEC, state, _checks(), None, 5000.0 + 3499.0)  # 100 s before the pause + 3499 s
    assert state.phase == Phase.EXPERIMENT
    state, _ = step(SPEC, state, None, Command.PROMOTE, 9000.0)
    assert (state.phase, state.weight) == (Phase.CONCLUDED, 50)
    assert state.reason == "experiment concluded: operator promote"


def test_a_spec_edit_between_steps_and_an_experiment_restarts_the_strategy() -> None:
    steps = make_spec({"steps": [{"weight": 5, "hold": "10m"}, {"weight": 100}]})
    state = initial_state(steps, 0.0)
    state, _ = step(SPEC, state, _checks(), None, 10.0)
    assert (state.phase, state.weight) == (Phase.EXPERIMENT, 50)
    even_more = make_spec({"experiment": {**EXPERIMENT_5050, "weights": {"baseline": 80, "zero-layer": 20}}})
    state, _ = step(even_more, state, _checks(), None, 20.0)
    assert (state.phase, state.weight) == (Phase.EXPERIMENT, 20)
    state, _ = step(steps, state, _checks(), None, 30.0)
    assert (state.phase, state.weight) == (Phase.PROGRESSING, 5)


def test_a_rollback_from_an_experiment_keeps_its_weight_among_the_recent_ones_the_pods_are_sized_for() -> (
    None
):
    state, _ = step(SPEC, initial_state(SPEC, 0.0), _checks(guard=Verdict.FAIL), None, 10.0)
    assert recent_weights(SPEC, state, 20.0, 600.0) == [0, 50]


def _look(rng: np.random.Generator, median: float, answers: int = 200) -> VariantLook:
    values = rng.lognormal(np.log(median), 0.3, answers).tolist()
    return VariantLook(
        requests=answers, errors=0, ttft_values={"default|0": values}, itl_values={"default|0": values}
    )


def test_the_experiment_row_keeps_its_counts_in_the_saved_state_and_passes_once_decided() -> None:
    plan = plan_for(SPEC)
    assert EXPERIMENT in plan.settings
    assert EXPERIMENT not in plan.tests  # it spends none of the rollout's budget
    rng = np.random.default_rng(5)
    evidence = tests.start(plan, "experiment:0", 0.0)
    for _ in range(5):
        looks = {"zero-layer": _look(rng, 0.8), "baseline": _look(rng, 0.4)}
        evidence = tests.add_look(evidence, plan, looks, "experiment:0")
    kept = evidence.tests[EXPERIMENT]
    assert isinstance(kept, ExperimentTests)
    assert kept.requests == (1000, 1000)
    state = RolloutState(Phase.EXPERIMENT, weight=50, evidence=evidence)
    restored = RolloutState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored.evidence is not None
    assert restored.evidence.tests[EXPERIMENT] == kept
    (check,) = [c for c in analyse(plan, evidence, Moment()) if c.name == EXPERIMENT]
    # both latencies are decided (2x); the error rates are equal (0 and 0), so not every difference is
    assert check.verdict == Verdict.INCONCLUSIVE
    assert "ttft_p50 2" in check.reason
    assert "decided" in check.reason
    steps_plan = plan_for(make_spec({"steps": [{"weight": 100}]}))
    assert dict(steps_plan.off)[EXPERIMENT] == "the strategy is not an experiment"


def test_a_new_split_or_duration_keeps_the_experiments_counts_and_a_new_alpha_starts_them_anew() -> None:
    key = plan_for(SPEC).key
    longer = make_spec(
        {"experiment": {**EXPERIMENT_5050, "duration": "3h", "weights": {"baseline": 70, "zero-layer": 30}}}
    )
    assert plan_for(longer).key == key
    stricter = make_spec({"experiment": {**EXPERIMENT_5050, "alpha": 0.01}})
    assert plan_for(stricter).key != key


def test_the_experiments_conclusion_is_told_once_as_news() -> None:
    """Concluded by its duration: the ExperimentConcluded Event and the experiment_concluded notification,
    once; the guard's looks after it tell nothing."""
    state, looks = initial_state(SPEC, 0.0), []
    for now, verdict in (
        (1800.0, Verdict.INCONCLUSIVE),
        (3600.0, Verdict.INCONCLUSIVE),
        (3605.0, Verdict.PASS),
    ):
        after, actions = step(SPEC, state, _checks(verdict), None, now)
        looks.append((state, after, tuple(actions), now))
        state = after
    events, kinds = told(looks, SPEC)
    assert ("ExperimentConcluded", False) in events
    assert kinds.count("experiment_concluded") == 1
