"""bench/epp_picking.py's policies: a scorer the picker lacks stops the bench before anything starts, and
the picker is started with every scorer the policy does not name turned off (its own defaults are 1)."""

from __future__ import annotations

import pytest

from bench.epp_picking import parse_policy, picker_argv
from gateway.spec.endpoint_picker import SCORERS


def test_a_policy_names_its_scorers_and_weights():
    policy = parse_policy("load=in_flight:2,queue:1")
    assert (policy.name, policy.profile, policy.scorers) == (
        "load",
        "override_host",
        {"in_flight": 2.0, "queue": 1.0},
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("affinity=nearby:1", "the picker has no scorer 'nearby'"),
        ("round_robin=queue:1", "a name other than Envoy's own"),
        ("load", "is not NAME=SCORER:WEIGHT"),
        ("load=queue:heavy", "'queue:heavy' is not SCORER:WEIGHT"),
    ],
)
def test_a_policy_the_picker_cannot_run_is_refused_with_the_reason(text, says):
    with pytest.raises(ValueError, match=says):
        parse_policy(text)


def test_the_picker_runs_only_the_policys_scorers():
    argv = picker_argv(parse_policy("load=queue:2"), ["127.0.10.2:8000"], 9002, 9003, 0.2)
    weights = dict(item.removeprefix("--scorer=").split("=") for item in argv if item.startswith("--scorer="))
    assert weights == {name: ("2" if name == "queue" else "0") for name in SCORERS}
