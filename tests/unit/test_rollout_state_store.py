"""The rollout state file: atomic writes, and a bad file is set aside instead of crash-looping."""

import json
import logging

import pytest

from gateway.rollout.machine import step
from gateway.rollout.rollout_state import Command, Phase, RolloutState, Transition
from gateway.rollout.state_store import load_state, save_state
from gateway.spec.model import validate_spec

SPEC = validate_spec(
    {
        "name": "zero-layer",
        "variants": {
            "baseline": {"endpoints": ["127.0.0.1:8001"]},
            "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
        },
        "routing": {"header": "X-Client-Type", "weights": {"baseline": 100}},
        "strategy": {"steps": [{"weight": 5, "hold": "10m"}, {"weight": 20, "hold": "30m"}, {"weight": 100}]},
    }
)
STATE = RolloutState(
    Phase.PROGRESSING,
    step=1,
    weight=20,
    held=1000.0,
    held_until=5000.0,
    reason="checks passed",
    history=(Transition(4000.0, "step 0", "step 1", "checks passed"),),
)


def test_a_saved_state_loads_back_equal(tmp_path):
    path = tmp_path / "rollout.json"
    save_state(path, STATE)
    assert load_state(path) == STATE
    paused, _ = step(SPEC, STATE, None, Command.PAUSE, 5100.0)
    save_state(path, paused)  # overwrites
    assert load_state(path) == paused
    assert [p.name for p in tmp_path.iterdir()] == ["rollout.json"]  # no temporary file left behind


def test_the_file_is_plain_json_with_a_format_version(tmp_path):
    path = tmp_path / "rollout.json"
    save_state(path, STATE)
    data = json.loads(path.read_text())
    assert data["version"] == 2
    assert data["state"]["phase"] == "progressing"
    assert data["state"]["held"] == 1000.0


def test_no_file_means_no_state(tmp_path):
    assert load_state(tmp_path / "rollout.json") is None


def test_a_corrupt_file_is_moved_aside_with_a_warning(tmp_path, caplog):
    for bad in (
        "{not json",
        "[]",
        '{"version": 2, "state": {"phase": "nowhere"}}',
        '{"version": 1, "state": {"phase": "nowhere"}}',
        '{"version": 7}',
    ):
        path = tmp_path / "rollout.json"
        path.write_text(bad)
        with caplog.at_level(logging.WARNING, logger="gateway.rollout.state_store"):
            assert load_state(path) is None
        assert "unreadable" in caplog.text
        assert not path.exists()
        assert (tmp_path / "rollout.json.corrupt").read_text() == bad
        assert load_state(path) is None  # the next start finds no file: no crash loop
        caplog.clear()


def test_a_failed_write_keeps_the_previous_state(tmp_path, monkeypatch):
    path = tmp_path / "rollout.json"
    save_state(path, STATE)

    def crash(*_):
        raise OSError("disk full")

    monkeypatch.setattr("gateway.rollout.state_store.os.replace", crash)
    with pytest.raises(OSError, match="disk full"):
        save_state(path, RolloutState(Phase.ROLLED_BACK))
    monkeypatch.undo()
    assert load_state(path) == STATE
    assert [p.name for p in tmp_path.iterdir()] == ["rollout.json"]
