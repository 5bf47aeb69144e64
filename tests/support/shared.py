"""Things a test run builds once for all its processes: under pytest-xdist each worker runs the session
fixtures itself, so what is expensive to build (trained weights, the third-party servers' tiny model) is
built by the first worker that needs it, under an exclusive lock, and read by the others."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

DONE = ".done"  # written last: a directory without it is a build that did not finish


def xdist_worker() -> str | None:
    """This process's xdist worker id (gw0, gw1, ...), None when the run is not distributed."""
    return os.environ.get("PYTEST_XDIST_WORKER")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if absent) for the block: one process of the machine at a
    time; the kernel releases it if the holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """`build(directory)` once per test run: in a fresh temporary directory without xdist (as a session
    fixture always did); with xdist, in `name` beside the workers' own temporary directories (the run's),
    built by the first worker to get here and reused by the others."""
    if xdist_worker() is None:
        return build(tmp_path_factory.mktemp(name))
    directory = tmp_path_factory.getbasetemp().parent / name
    with locked(directory.with_name(f"{name}.lock")):
        if not (directory / DONE).exists():
            shutil.rmtree(directory, ignore_errors=True)  # a worker that failed half-way left it
            directory.mkdir()
            built = build(directory)
            assert built == directory, f"{build} built into {built}, not {directory}"
            (directory / DONE).touch()
    return directory
