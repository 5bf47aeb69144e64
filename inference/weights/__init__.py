"""Checkpoints and what state their bias layer is in (status.py), read without loading the model:
check.py decides, layout.py finds the files, shards.py reads headers and chosen tensors, dtypes.py and
quantized.py turn bytes into values, pickles.py refuses pickles; rewrite.py zeroes and erases."""

from inference.weights.check import check_weights
from inference.weights.rewrite import erase_bias, save_sharded, zero_bias
from inference.weights.status import BIAS_MARKER, READABLE, StatusReport, WeightStatus

__all__ = [
    "BIAS_MARKER",
    "READABLE",
    "StatusReport",
    "WeightStatus",
    "check_weights",
    "erase_bias",
    "save_sharded",
    "zero_bias",
]
