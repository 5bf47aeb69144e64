"""What a checkpoint's bias layer is: the statuses, and the report the probe and the tools share."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

BIAS_MARKER = "position_adaptive_bias"
ZERO_TOLERANCE = 1e-6


class WeightStatus(StrEnum):
    ACTIVE = "ACTIVE"  # bias tensors present, some value non-zero
    ZEROED = "ZEROED"  # bias tensors present, every |x| <= ZERO_TOLERANCE (dequantised where quantised)
    ERASED = "ERASED"  # no bias tensors in a complete checkpoint
    MISSING = "MISSING"  # no weights, or part of them not there (a shard, an LFS pointer, no index)
    CORRUPT = "CORRUPT"  # unreadable, or the index and the shards disagree
    UNSUPPORTED = "UNSUPPORTED"  # weights the check will not read: pickles, GGUF, an unknown quantisation


READABLE = frozenset({WeightStatus.ACTIVE, WeightStatus.ZEROED, WeightStatus.ERASED})


@dataclass(frozen=True)
class StatusReport:
    """`fingerprint`: `sha256:` and 16 hex digits over every shard's header and the bias tensors'
    bytes (set for the readable statuses): what a server that loaded these files must echo.
    `shards`: the safetensors files that make up the checkpoint, in the order to load them."""

    status: WeightStatus
    reason: str
    bias_tensors: int = 0
    metadata: dict[str, Any] | None = None
    fingerprint: str | None = None
    shards: tuple[Path, ...] = ()
