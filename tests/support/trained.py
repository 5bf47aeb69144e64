"""Trained weights for tests: the pipeline `make weights` runs (train the baseline on the stdlib's
source, derive the zero-layer forms), CI-sized: the default model for fewer steps on a slice of the
corpus. Enough training that the baseline's bias matters (so ERASED answers differ) and the derived
ACTIVE form keeps the baseline's answers.

`make test` makes them before its first phase and keeps them until the code that trains them changes
(`make test-weights`, GRAYSTACK_TEST_WEIGHTS); `.ci/run` makes them beside lint. The tests that serve them
all run in `make test`'s paced phase, where training took the longest module's first half minute."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import torch

from inference.training import pipeline
from inference.training.derive import FINE_TUNE
from inference.training.train import TrainOptions
from tests.support.shared import DONE

TRAIN = TrainOptions(steps=250, max_seconds=600)
TRAIN_BYTES = 2_000_000
MADE = "GRAYSTACK_TEST_WEIGHTS"  # a directory `make test-weights` made, for every phase of `make test`


def quiet(line: str) -> None:
    """The pipeline's progress lines: not wanted in a test's output."""


def train_pipeline(directory: Path) -> Path:
    """`directory` holding baseline, zero-layer (ACTIVE), zero-layer-zeroed and zero-layer-erased."""
    torch.set_num_threads(2)
    pipeline.train(directory, TRAIN, train_bytes=TRAIN_BYTES, report=quiet)
    pipeline.derive(directory, FINE_TUNE, train_bytes=TRAIN_BYTES, report=quiet)
    return directory


def made_before() -> Path | None:
    """The weights `make test` made before the run (MADE), None where it did not say; a directory that
    was not finished is refused, naming the variable."""
    directory = os.environ.get(MADE)
    if not directory:
        return None
    if not (Path(directory) / DONE).exists():
        raise RuntimeError(f"{MADE}={directory} holds no finished weights: `make test-weights` makes them")
    return Path(directory)


def main() -> None:
    """`python -m tests.support.trained DIR`: the weights into DIR, marked finished last."""
    directory = Path(sys.argv[1])
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    train_pipeline(directory)
    (directory / DONE).touch()


if __name__ == "__main__":
    main()
