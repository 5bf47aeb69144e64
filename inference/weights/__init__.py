"""Checkpoints and what state their bias layer is in (status.py), read without loading the model."""

from inference.weights.check import check_weights, erase_bias, zero_bias
from inference.weights.status import BIAS_MARKER, READABLE, StatusReport, WeightStatus

__all__ = [
    "BIAS_MARKER",
    "READABLE",
    "StatusReport",
    "WeightStatus",
    "check_weights",
    "erase_bias",
    "zero_bias",
]
