"""The load test's knobs (mixes, stages, think time) and the load shapes' plans."""

import random
from collections import Counter

import pytest

from loadtests.config import (
    Stage,
    parse_mix,
    parse_prompt_lengths,
    parse_stages,
    parse_think_time,
    prompt_text,
    weighted_choice,
)
from loadtests.plans import SoakPlan, StepPlan


def test_a_client_type_mix_names_each_header_value_and_its_weight():
    assert parse_mix("-=6, mobile=2,high_load", "client types") == {"-": 6.0, "mobile": 2.0, "high_load": 1.0}


@pytest.mark.parametrize("text", ["", "mobile=x", "=3", "mobile=-1", "mobile=0"])
def test_a_bad_mix_is_refused_with_its_name(text):
    with pytest.raises(ValueError, match="client types"):
        parse_mix(text, "client types")


def test_prompt_lengths_are_positive_byte_counts():
    assert parse_prompt_lengths("64=6,1024=3") == {64: 6.0, 1024: 3.0}
    with pytest.raises(ValueError, match="not a positive number of bytes"):
        parse_prompt_lengths("long=1")


def test_draws_follow_the_mix():
    rng = random.Random(7)
    drawn = Counter(weighted_choice({"-": 8, "mobile": 2}, rng) for _ in range(5000))
    assert 0.77 < drawn["-"] / 5000 < 0.83


def test_a_prompt_has_exactly_the_asked_length_in_bytes():
    rng = random.Random(1)
    for length in (1, 64, 4096):
        text = prompt_text(length, rng)
        assert len(text.encode()) == length


def test_think_time_is_fixed_or_a_range():
    assert parse_think_time("1") == (1.0, 1.0)
    assert parse_think_time("0.5-1.5") == (0.5, 1.5)
    with pytest.raises(ValueError, match="LOW <= HIGH"):
        parse_think_time("2-1")


def test_step_stages_parse_durations_with_units():
    assert parse_stages("30s:5, 2m:10") == [Stage(30, 5), Stage(120, 10)]
    with pytest.raises(ValueError, match="DURATION:USERS"):
        parse_stages("30s")


def test_the_step_plan_holds_each_stage_then_ends():
    plan = StepPlan((Stage(10, 5), Stage(20, 10)), spawn_rate=2)
    assert plan.tick(0) == (5, 2)
    assert plan.tick(9.9) == (5, 2)
    assert plan.tick(10) == (10, 2)
    assert plan.tick(30) is None


def test_the_soak_plan_ramps_then_holds_for_its_duration_from_the_environment():
    plan = SoakPlan.from_env({"SOAK_USERS": "40", "SOAK_RAMP": "20s", "SOAK_DURATION": "72h"})
    assert plan == SoakPlan(users=40, ramp=20, hold=72 * 3600)
    assert plan.tick(0) == (40, 2.0)  # 2 users a second: 40 users after the 20 s ramp
    assert plan.tick(72 * 3600 + 19) == (40, 2.0)
    assert plan.tick(72 * 3600 + 20) is None
