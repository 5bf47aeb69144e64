"""Trained weights for tests: the pipeline `make weights` runs (train the baseline on the stdlib's
source, derive the zero-layer forms), CI-sized: the default model for fewer steps on a slice of the
corpus. Enough training that the baseline's bias matters (so ERASED answers differ) and the derived
ACTIVE form keeps the baseline's answers."""

from __future__ import annotations

from pathlib import Path

import torch

from inference.training import pipeline
from inference.training.derive import FINE_TUNE
from inference.training.train import TrainOptions

TRAIN = TrainOptions(steps=250, max_seconds=600)
TRAIN_BYTES = 2_000_000


def quiet(line: str) -> None:
    """The pipeline's progress lines: not wanted in a test's output."""


def train_pipeline(directory: Path) -> Path:
    """`directory` holding baseline, zero-layer (ACTIVE), zero-layer-zeroed and zero-layer-erased."""
    torch.set_num_threads(2)
    pipeline.train(directory, TRAIN, train_bytes=TRAIN_BYTES, report=quiet)
    pipeline.derive(directory, FINE_TUNE, train_bytes=TRAIN_BYTES, report=quiet)
    return directory
