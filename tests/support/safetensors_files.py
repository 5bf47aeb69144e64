"""Safetensors files written byte by byte, for any dtype and any fault (the writers refuse both)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from safetensors import SafetensorError, safe_open


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]], metadata=None) -> Path:
    """`tensors`: name -> (dtype, shape, raw bytes), laid out in the given order."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    return path


def dtypes_safetensors_accepts(scratch: Path) -> list[str]:
    """Every dtype name the installed safetensors library accepts, from its own error message for a
    name it does not (so a new dtype in a new release shows up here, and in the tests that use it)."""
    write_safetensors(scratch, {"t": ("NOT_A_DTYPE", [0], b"")})
    try:
        with safe_open(str(scratch), framework="numpy"):
            pass
    except SafetensorError as error:
        return re.findall(r"`(\w+)`", str(error).partition("expected one of")[2])
    raise AssertionError("safetensors accepted the dtype NOT_A_DTYPE")
