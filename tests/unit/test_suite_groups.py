"""`make test` runs side by side (pytest-xdist, --dist loadgroup), and a module whose tests share a started
stack keeps them on one worker (tests/conftest.py): otherwise each worker that gets one of its tests
starts the whole stack again. pytest 9.2 stopped reading the group xdist 3.8 writes into a node id, and
nothing failed: each shared stack was just started up to three times. This runs a module of that shape
through our own grouping hook, side by side, and asserts that one worker ran it all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MODULE = """
import os

import pytest


@pytest.fixture(scope="module")
def stack():
    return os.environ["PYTEST_XDIST_WORKER"]


@pytest.mark.parametrize("n", range(6))
def test_reads_the_stack(stack, n, tmp_path_factory):
    (tmp_path_factory.getbasetemp().parent.parent / f"ran-{n}").write_text(stack)
"""


def test_a_modules_shared_stack_is_started_by_one_worker(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_shared_stack.py").write_text(MODULE)
    (tmp_path / "runs").mkdir()
    argv = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q"]
    argv += ["-n", "2", "--dist", "loadgroup", "--basetemp", str(tmp_path / "runs" / "base")]
    argv += ["--rootdir", str(tmp_path), str(tmp_path / "test_shared_stack.py")]
    run = subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = {path.read_text() for path in (tmp_path / "runs").glob("ran-*")}
    assert len(list((tmp_path / "runs").glob("ran-*"))) == 6, run.stdout
    assert len(workers) == 1, f"the module's tests ran on {sorted(workers)}: its stack started once on each"
