"""What a test run builds once (tests/support/shared.py): under `make test`'s two phases, the second pytest
run reads what the first built, instead of training the weights again."""

from __future__ import annotations

from pathlib import Path

from tests.support.shared import BUILDS, DONE, once_per_run


def counting(calls: list[Path]):
    def build(directory: Path) -> Path:
        calls.append(directory)
        (directory / "model.safetensors").write_bytes(b"weights")
        return directory

    return build


def test_two_runs_given_one_builds_directory_build_once_and_read_it(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv(BUILDS, str(tmp_path / "builds"))
    calls: list[Path] = []
    first = once_per_run(tmp_path_factory, "weights", counting(calls))
    second = once_per_run(tmp_path_factory, "weights", counting(calls))  # the paced phase, later
    assert first == second == tmp_path / "builds" / "weights"
    assert calls == [first]
    assert (second / "model.safetensors").read_bytes() == b"weights"


def test_a_build_that_did_not_finish_is_built_again(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv(BUILDS, str(tmp_path))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "half.safetensors").write_bytes(b"cut")  # no DONE: the builder died
    calls: list[Path] = []
    built = once_per_run(tmp_path_factory, "weights", counting(calls))
    assert calls == [built]
    assert sorted(p.name for p in built.iterdir()) == sorted([DONE, "model.safetensors"])


def test_without_a_builds_directory_each_serial_run_builds_its_own(tmp_path_factory, monkeypatch):
    monkeypatch.delenv(BUILDS, raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    calls: list[Path] = []
    once_per_run(tmp_path_factory, "weights", counting(calls))
    once_per_run(tmp_path_factory, "weights", counting(calls))
    assert len(calls) == 2
    assert calls[0] != calls[1]
