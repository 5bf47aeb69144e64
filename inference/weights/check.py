"""Checkpoints as safetensors, and what state their bias layer is in.

The status check reads the header and only the `*position_adaptive_bias*` tensors' bytes, with
numpy and no unpickling, so the probe sidecar can run it every interval without loading the model:
  ACTIVE   bias tensors present, some value non-zero
  ZEROED   bias tensors present, every |x| <= 1e-6
  ERASED   no bias tensors
  MISSING  no file
  CORRUPT  unreadable header or data (the reason says what)
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np

from inference.weights.status import BIAS_MARKER, ZERO_TOLERANCE, StatusReport, WeightStatus

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened to float32 below
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def _corrupt(reason: str) -> StatusReport:
    return StatusReport(WeightStatus.CORRUPT, reason)


def read_header(handle, size: int) -> tuple[dict, int]:
    """The parsed header and where the data starts; ValueError naming what is wrong."""
    if size < 8:
        raise ValueError(f"file is {size} bytes, shorter than the 8-byte header length")
    prefix = handle.read(8)
    if len(prefix) < 8:
        raise ValueError("the file ended inside the header length (was it cut short while being read?)")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or length > size - 8:
        raise ValueError(f"header length {length} runs past the end of the {size}-byte file")
    try:
        header = json.loads(handle.read(length))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"header is not JSON: {error}") from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    return header, 8 + length


def _check_entry(name: str, entry: dict, data_start: int, size: int) -> None:
    """A tensor's header entry is well formed and its bytes lie inside the file (header only)."""
    if not isinstance(entry, dict) or entry.get("dtype") not in _DTYPES:
        raise ValueError(
            f"tensor {name!r}: unknown dtype {entry.get('dtype') if isinstance(entry, dict) else entry!r}"
        )
    dtype = _DTYPES[entry["dtype"]]
    begin, end = entry.get("data_offsets", (None, None))
    shape = entry.get("shape")
    if not (
        isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end and isinstance(shape, list)
    ):
        raise ValueError(f"tensor {name!r}: bad data_offsets or shape")
    if data_start + end > size:
        raise ValueError(f"tensor {name!r}: data at [{begin}, {end}) lies outside the file")
    if (end - begin) != math.prod(shape) * dtype.itemsize:
        raise ValueError(
            f"tensor {name!r}: {end - begin} bytes do not hold shape {shape} of {entry['dtype']}"
        )


def _tensor_values(handle, name: str, entry: dict, data_start: int) -> np.ndarray:
    """A checked tensor's values, as float where it is a float type."""
    begin, end = entry["data_offsets"]
    handle.seek(data_start + begin)
    raw = handle.read(end - begin)
    if len(raw) != end - begin:
        raise ValueError(f"tensor {name!r}: file ended while reading its data")
    values = np.frombuffer(raw, dtype=_DTYPES[entry["dtype"]])
    if entry["dtype"] == "BF16":
        values = (values.astype(np.uint32) << 16).view(np.float32)
    return values


def check_weights(path: Path) -> StatusReport:
    """The bias layer's status, reading only the header and the bias tensors."""
    if not path.exists():
        return StatusReport(WeightStatus.MISSING, f"{path}: no such file")
    if not path.is_file():
        return StatusReport(WeightStatus.MISSING, f"{path}: not a regular file")
    try:
        size = os.stat(path).st_size
        with path.open("rb") as handle:
            header, data_start = read_header(handle, size)
            metadata = header.pop("__metadata__", None)
            for name, entry in header.items():  # a truncated file is corrupt even if the bias is intact
                _check_entry(name, entry, data_start, size)
            bias = {name: entry for name, entry in header.items() if BIAS_MARKER in name}
            largest = 0.0
            for name, entry in sorted(bias.items()):
                values = _tensor_values(handle, name, entry, data_start)
                if values.size:
                    largest = max(largest, float(np.nanmax(np.abs(values.astype(np.float64)))))
                    if np.isnan(values.astype(np.float64)).any():
                        largest = math.inf
    except OSError as error:
        return _corrupt(f"{path}: cannot read: {error.strerror or error}")
    except ValueError as error:
        return _corrupt(f"{path}: {error}")
    if not bias:
        return StatusReport(WeightStatus.ERASED, "no *position_adaptive_bias* tensors", 0, metadata)
    if largest <= ZERO_TOLERANCE:
        return StatusReport(
            WeightStatus.ZEROED, f"{len(bias)} bias tensors, all |x| <= {ZERO_TOLERANCE}", len(bias), metadata
        )
    return StatusReport(
        WeightStatus.ACTIVE, f"{len(bias)} bias tensors, max |x| = {largest:.3g}", len(bias), metadata
    )


def _rewrite(path: Path, keep_or_change) -> None:
    """Rewrite a checkpoint through `keep_or_change(name, array) -> array | None` (None drops it),
    atomically: a probe reading the file mid-write sees the old file or the new one, never half."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="numpy") as checkpoint:
        metadata = checkpoint.metadata() or {}
        tensors = {}
        for name in checkpoint.keys():  # noqa: SIM118 - safe_open is not a mapping
            changed = keep_or_change(name, checkpoint.get_tensor(name))
            if changed is not None:
                tensors[name] = changed
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def zero_bias(path: Path) -> None:
    """Set every bias tensor to zero (status becomes ZEROED)."""
    _rewrite(path, lambda name, array: np.zeros_like(array) if BIAS_MARKER in name else array)


def erase_bias(path: Path) -> None:
    """Remove every bias tensor (status becomes ERASED)."""
    _rewrite(path, lambda name, array: None if BIAS_MARKER in name else array)
