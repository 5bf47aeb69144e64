"""One safetensors file, read for its header and for chosen tensors' bytes, never in full.

The safetensors library (`safe_open`) validates the structure: offsets contiguous, sizes that match
the shapes, the data covering the file exactly, a dtype it knows. The header is read here too, with
plain reads, for the tensors' offsets and for the fingerprint; the tensors' bytes are read with
`os.pread` at those offsets, so the bytes read do not grow with the tensors that are not asked for.

`safe_open` maps the file it opens, and a file truncated under a map kills the reading process (SIGBUS),
as a checkpoint rewritten in place does while the probe reads it. So the library validates a sparse copy
of what was read: the header, then a hole as long as the file's data (no bytes written, none read).
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit
LFS_POINTER = b"version https://git-lfs"


class ShardError(ValueError):
    """A file that is not a readable safetensors file; the message says what is wrong."""


class NotFetched(ShardError):
    """A Git LFS pointer where the weights should be: the download is not complete."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets into the file, header included
    end: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Shard:
    path: Path
    header: bytes  # the JSON header as stored, for the fingerprint
    tensors: dict[str, Tensor]
    metadata: dict[str, str]

    def read(self, name: str) -> bytes:
        tensor = self.tensors[name]
        with self.path.open("rb") as handle:
            raw = os.pread(handle.fileno(), tensor.end - tensor.begin, tensor.begin)
        if len(raw) != tensor.end - tensor.begin:
            raise ShardError(f"{self.path.name}: the file ended inside tensor {name!r}")
        return raw


def _header(path: Path) -> tuple[bytes, int, int]:
    """The JSON header, where the data starts, and the file's size, all from one open."""
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if prefix.startswith(LFS_POINTER[:8]):
            raise NotFetched(f"{path.name} is a Git LFS pointer, not weights (was `git lfs pull` run?)")
        if len(prefix) < 8:
            raise ShardError(f"{path.name} is {len(prefix)} bytes, shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        size = os.fstat(handle.fileno()).st_size
        if length > MAX_HEADER_BYTES or length > size - 8:
            raise ShardError(f"{path.name}: header length {length} runs past the end of the {size}-byte file")
        header = handle.read(length)
    if len(header) < length:
        raise ShardError(
            f"{path.name}: the file ended inside its header (was it cut short while being read?)"
        )
    return header, 8 + length, size


def _validate(path: Path, header: bytes, size: int) -> None:
    """safetensors' validation of `header` against a file of `size` bytes, on a sparse copy of ours."""
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as copy:
        copy.write(struct.pack("<Q", len(header)) + header)
        copy.truncate(size)
        copy.flush()
        try:
            with safe_open(copy.name, framework="numpy"):
                pass
        except SafetensorError as error:
            message = str(error).partition(", expected one of")[0]  # not the list of all 22 dtypes
            raise ShardError(f"{path.name}: {message}") from None


def _tensor(path: Path, name: str, entry: Any, data_start: int) -> Tensor:
    try:
        begin, end = entry["data_offsets"]
        return Tensor(str(entry["dtype"]), tuple(entry["shape"]), data_start + begin, data_start + end)
    except (KeyError, TypeError, ValueError):  # safe_open passed it: the file changed in between
        raise ShardError(f"{path.name}: tensor {name!r}: header entry {entry!r} is not a tensor") from None


def read_shard(path: Path) -> Shard:
    """The shard's header, validated by safetensors; ShardError naming the file and the fault."""
    raw, data_start, size = _header(path)
    _validate(path, raw, size)
    try:
        parsed = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:  # safe_open passed it: the file changed
        raise ShardError(f"{path.name}: header is not JSON: {error}") from None
    metadata = parsed.pop("__metadata__", None) or {}
    tensors = {name: _tensor(path, name, entry, data_start) for name, entry in parsed.items()}
    return Shard(path, raw, tensors, metadata)
