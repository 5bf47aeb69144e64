"""strategy: experiment's quality intervals (gateway/rollout/checks/experiment.py): structure failures,
greedy agreement and the judge's win rate. Coverage at every look by simulation, with a known true rate,
through the row's own counting and the report; what is left out and why; the union bound's count; and
that the decision does not wait for them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gateway.rollout.checks.base import Plan
from gateway.rollout.checks.experiment import (
    EXPERIMENT,
    PARTS,
    ExperimentRow,
    ExperimentSettings,
    ExperimentTests,
    QualityOn,
    report,
)
from gateway.rollout.increments import VariantLook
from gateway.rollout.plan import plan_for
from gateway.rollout.sequential.quantiles import add_values
from tests.unit.test_experiment_strategy import EXPERIMENT_5050, make_spec

ALPHA = 0.05
RUNS = 500
LOOKS = 25
JUDGE = {"url": "http://judge:8000/v1", "model": "judge"}
ALL_ON = {"capture_percent": 10, "structure": True, "max_greedy_disagreement": 0.05, "judge": JUDGE}


def _plan(quality: dict[str, Any] | None) -> Plan:
    analysis: dict[str, Any] = {"interval": "5s", **({"quality": quality} if quality is not None else {})}
    return plan_for(make_spec({"experiment": EXPERIMENT_5050}, analysis=analysis))


def _settings(plan: Plan) -> ExperimentSettings:
    settings = plan.settings[EXPERIMENT]
    assert isinstance(settings, ExperimentSettings)
    return settings


def _looks(rng: np.random.Generator) -> tuple[VariantLook, VariantLook]:
    """One look's quality counts: malformed 4 % vs 2 % of 50 captured answers each; 20 greedy pairs, 90 %
    equal; 12 judge verdicts, a quarter ties, the candidate winning 60 % of the decisive ones."""
    mine, other = (int(rng.binomial(50, p)) for p in (0.04, 0.02))
    ties = int(rng.binomial(12, 0.25))
    decisive = 12 - ties
    wins = int(rng.binomial(decisive, 0.6))
    ours = VariantLook(
        structure={"default": (50, mine, 0)},
        compared=20,
        differed=int(rng.binomial(20, 0.1)),
        judged=decisive,
        lost=decisive - wins,
        tied=ties,
    )
    return ours, VariantLook(structure={"default": (50, other, 0)})


TRUTH = {"structure_failures": 0.04 - 0.02, "greedy_agreement": 0.9, "judge_win_rate": 0.6}


def test_each_quality_interval_covers_its_truth_at_every_look_in_at_least_1_minus_alpha_of_runs() -> None:
    """Each interval at ALPHA itself (the report's alpha set to parts x ALPHA), so a miss rate above ALPHA
    would show: the report's own level, alpha / parts, is far stricter."""
    plan = _plan(ALL_ON)
    settings = _settings(plan)
    assert settings.parts == PARTS + 4
    loose = replace(settings, alpha=ALPHA * settings.parts)
    row, rng = ExperimentRow(), np.random.default_rng(38)
    missed = dict.fromkeys(TRUTH, 0)
    for _ in range(RUNS):
        tests, miss = row.start(settings), dict.fromkeys(TRUTH, False)
        for _ in range(LOOKS):
            tests = row.add(tests, settings, plan, *_looks(rng))
            for d in report(tests, loose).quality:
                miss[d.name] |= not d.lower <= TRUTH[d.name] <= d.upper
        for name, value in miss.items():
            missed[name] += value
    # 500 runs: a binomial's sd at alpha is 1 %, so 3 sd of slack above alpha
    assert all(share / RUNS <= ALPHA + 0.03 for share in missed.values()), missed


def test_the_intervals_narrow_around_the_truth_and_decide_a_clear_difference() -> None:
    plan = _plan(ALL_ON)
    settings, row, rng = _settings(plan), ExperimentRow(), np.random.default_rng(1)
    tests = row.start(settings)
    for _ in range(200):
        tests = row.add(tests, settings, plan, *_looks(rng))
    by_name = {d.name: d for d in report(tests, settings).quality}
    assert set(by_name) == set(TRUTH)
    structure, agreement, judge = (by_name[name] for name in TRUTH)
    assert (structure.kind, agreement.kind, judge.kind) == ("difference", "share", "share")
    assert structure.samples == (10_000, 10_000)
    assert structure.decided
    assert structure.lower > 0
    assert agreement.samples == (4000, 4000)
    assert agreement.decided
    assert agreement.upper < 0.95
    assert (agreement.null, judge.null) == (1.0, 0.5)
    assert judge.decided
    assert judge.lower > 0.5
    assert judge.ties == tests.judged[2] > 0  # shown, and left out of the share
    assert judge.samples[0] == tests.judged[0]
    assert judge.estimate == tests.judged[1] / tests.judged[0]


def test_a_quality_check_that_is_off_is_left_out_with_why_and_counts_in_no_union_bound() -> None:
    settings = _settings(_plan(None))
    assert settings.parts == PARTS
    found = report(ExperimentTests(), settings)
    assert found.quality == ()
    assert found.quality_not_compared == (
        "structure_failures (off: analysis.quality.structure is off)",
        "greedy_agreement (off: neither quality.max_greedy_disagreement nor min_shadow_agreement is set)",
        "judge_win_rate (off: analysis.quality has no judge)",
    )
    only_structure = _settings(_plan({"capture_percent": 5, "structure": True}))
    assert only_structure.parts == PARTS + 2
    assert only_structure.quality.off == (
        "greedy_agreement (off: neither quality.max_greedy_disagreement nor min_shadow_agreement is set)",
        "judge_win_rate (off: analysis.quality has no judge)",
    )


def test_a_quality_check_that_is_on_with_nothing_to_read_yet_says_why() -> None:
    found = report(ExperimentTests(judged=(0, 0, 3)), _settings(_plan(ALL_ON)))
    assert found.quality == ()
    structure, agreement, judge = found.quality_not_compared
    assert structure.startswith("structure_failures (no captured answer of both variants checked yet")
    assert agreement.startswith("greedy_agreement (no greedy pair compared yet: a pair is a shadow copy")
    assert judge.startswith("judge_win_rate (no decisive verdict yet, 3 ties")
    assert "strategy.experiment.mirror_percent" in judge


def test_the_decision_reads_the_serving_differences_and_not_the_quality_ones() -> None:
    rng = np.random.default_rng(3)
    slow, fast = rng.lognormal(np.log(0.6), 0.3, 4000), rng.lognormal(np.log(0.4), 0.3, 4000)
    tests = ExperimentTests(
        requests=(4000, 4000),
        errors=(400, 4),
        ttft=(add_values({}, slow), add_values({}, fast)),
        tpot=(add_values({}, slow), add_values({}, fast)),
        checked=(100, 100),
        malformed=(2, 2),
    )
    settings = _settings(_plan(ALL_ON))
    found = report(tests, settings)
    assert all(d.decided for d in found.differences)
    assert not found.not_compared
    (structure,) = found.quality
    assert not structure.decided
    assert len(found.quality_not_compared) == 2
    assert found.decided  # undecided and missing quality intervals hold nothing
    assert replace(settings, quality=QualityOn()).parts == PARTS


def test_turning_a_quality_check_on_starts_the_experiments_counts_anew() -> None:
    """The level of every interval changes with the count: counts seen at the old one are not re-split."""
    keys = {_plan(q).key for q in (None, {"structure": False}, {"structure": True}, ALL_ON)}
    assert len(keys) == 4
