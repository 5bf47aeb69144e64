"""A rollout saved in the state's format 1 (one evidence record, before each check kept its tests apart)
resumes the same tests under format 2: the checks a restarted gateway reports after ten more looks are
the ones the gateway that wrote the file reported (tests/unit/saved_states/, made at commit d701f41 by
`python -m tests.support.saved_state`, every sequential test with evidence, on histograms and on the
answers' exact times). A format-2 state saved and read back resumes them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.rollout.plan import plan_for
from gateway.rollout.state_store import decode_state, encode_state
from tests.support.saved_state import checks_as_data, resumed, spec

SAVED = Path(__file__).parent / "saved_states"
SOURCES = ("histograms", "answers")


def expected(source: str) -> list[dict]:
    return json.loads((SAVED / f"{source}.checks.json").read_text())


@pytest.mark.parametrize("source", SOURCES)
def test_a_format_1_state_resumes_the_same_tests(source):
    text = (SAVED / f"{source}.state.json").read_text()
    assert json.loads(text)["version"] == 1
    state = decode_state(text)
    assert state.evidence is not None
    assert state.evidence.plan == json.loads(text)["state"]["evidence"]["plan"]  # the same plan's tests
    found = checks_as_data(resumed(spec(source), state))
    assert [c["name"] for c in found] == [c["name"] for c in expected(source)]
    for ours, theirs in zip(found, expected(source), strict=True):
        assert (ours["name"], ours["verdict"]) == (theirs["name"], theirs["verdict"])
        for number in ("value", "samples", "log_evalue", "log_bound"):
            want = theirs[number]
            assert ours[number] == (want if want is None else pytest.approx(want, rel=1e-12)), ours["name"]
    # every test the file held ran on: had one started over, its evidence would be a few looks' worth
    assert {c["name"] for c in found if c["samples"] > 100} >= {"error_rate", "ttft_p95", "ttft_vs_baseline"}


@pytest.mark.parametrize("source", SOURCES)
def test_a_format_2_state_read_back_resumes_the_same_tests(source):
    state = decode_state((SAVED / f"{source}.state.json").read_text())
    text = encode_state(state)
    assert json.loads(text)["version"] == 2
    assert decode_state(text) == state
    assert checks_as_data(resumed(spec(source), decode_state(text))) == checks_as_data(
        resumed(spec(source), state)
    )


def test_the_plan_key_is_derived_as_in_format_1():
    """The key names the tests a state holds: were it derived otherwise now, every saved rollout would
    start its tests over on the first look after an upgrade."""
    for source in SOURCES:
        saved = json.loads((SAVED / f"{source}.state.json").read_text())["state"]["evidence"]["plan"]
        assert plan_for(spec(source)).key == saved
