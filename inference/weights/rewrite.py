"""Zero or erase the bias layer of a checkpoint, a file or a sharded directory, without a torn state.

Shards are rewritten at the byte level (the header, then each tensor's bytes copied or zeroed in
chunks), so every dtype survives as it was and memory does not grow with the shard. A single file is
replaced atomically. In a directory only the shards that hold bias tensors are rewritten, each to a new
file; the index is replaced last, atomically, and only then are the old shards removed. A reader
therefore sees the old checkpoint or the new one: the index it read always names shards that agree
with it (a reader still holding the old index as its shards go can find one gone, and reads MISSING once).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inference.weights.layout import Decided, Layout, locate
from inference.weights.shards import Shard, read_shard
from inference.weights.status import BIAS_MARKER

CHUNK = 16 * 1024 * 1024
_FRESH_SUFFIX = re.compile(r"-[0-9a-f]{8}$")

Change = Callable[[str], str]  # tensor name -> "keep" | "zero" | "drop"


def _write_shard(shard: Shard, target: Path, change: Change) -> bool:
    """`shard` rewritten to `target` through `change`; False (nothing written) when no tensor is left."""
    kept = sorted((t.begin, name) for name, t in shard.tensors.items() if change(name) != "drop")
    if not kept:
        return False
    header: dict[str, Any] = {"__metadata__": shard.metadata} if shard.metadata else {}
    offset = 0
    for _, name in kept:
        tensor = shard.tensors[name]
        size = tensor.end - tensor.begin
        header[name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with shard.path.open("rb") as source, target.open("wb") as out:
        out.write(len(raw).to_bytes(8, "little") + raw)
        for _, name in kept:
            tensor = shard.tensors[name]
            zero = change(name) == "zero"
            for start in range(tensor.begin, tensor.end, CHUNK):
                length = min(CHUNK, tensor.end - start)
                out.write(bytes(length) if zero else os.pread(source.fileno(), length, start))
        out.flush()
        os.fsync(out.fileno())
    return True


def _replace_file(shard: Shard, change: Change) -> None:
    tmp = shard.path.with_name(f".{shard.path.name}.tmp")
    _write_shard(shard, tmp, change)
    os.replace(tmp, shard.path)


def _fresh_name(name: str) -> str:
    stem = _FRESH_SUFFIX.sub("", name.removesuffix(".safetensors"))
    return f"{stem}-{secrets.token_hex(4)}.safetensors"


def _replace_shards(layout: Layout, change: Change) -> None:
    assert layout.weight_map is not None
    assert layout.index_path is not None
    weight_map = dict(layout.weight_map)
    shards = [read_shard(path) for path in layout.shards]
    retired = []
    for shard in shards:
        if not any(BIAS_MARKER in name for name in shard.tensors):
            continue
        fresh = shard.path.with_name(_fresh_name(shard.path.name))
        written = _write_shard(shard, fresh, change)
        for name in shard.tensors:
            if change(name) == "drop":
                weight_map.pop(name, None)
            elif written:
                weight_map[name] = fresh.name
        retired.append(shard.path)
    index = json.loads(layout.index)
    index["weight_map"] = dict(sorted(weight_map.items()))
    kept_bytes = sum(
        t.end - t.begin for shard in shards for name, t in shard.tensors.items() if name in weight_map
    )
    index.setdefault("metadata", {})["total_size"] = kept_bytes
    index_path = layout.index_path
    tmp = index_path.with_name(f".{index_path.name}.tmp")
    tmp.write_text(json.dumps(index, indent=2) + "\n")
    os.replace(tmp, index_path)
    for path in retired:
        path.unlink()


def _rewrite(path: Path, change: Change) -> None:
    try:
        layout = locate(path)
    except Decided as decided:
        raise ValueError(f"{path}: {decided.status}: {decided.reason}") from None
    if layout.weight_map is None:
        _replace_file(read_shard(layout.shards[0]), change)
    else:
        _replace_shards(layout, change)


def zero_bias(path: Path) -> None:
    """Set every bias tensor's bytes to zero (status becomes ZEROED)."""
    _rewrite(path, lambda name: "zero" if BIAS_MARKER in name else "keep")


def erase_bias(path: Path) -> None:
    """Remove every bias tensor (status becomes ERASED)."""
    _rewrite(path, lambda name: "drop" if BIAS_MARKER in name else "keep")


def save_sharded(
    arrays: Mapping[str, np.ndarray],
    directory: Path,
    max_shard_bytes: int,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """A Hugging Face style sharded checkpoint (`model-0000N-of-0000M.safetensors` and the index),
    tensors in name order, a new shard whenever the next tensor would pass `max_shard_bytes`."""
    from safetensors.numpy import save_file

    groups: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        if groups[-1] and size + array.nbytes > max_shard_bytes:
            groups.append({})
            size = 0
        groups[-1][name] = array
        size += array.nbytes
    directory.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for number, group in enumerate(groups, start=1):
        name = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        save_file(group, str(directory / name), metadata=dict(metadata or {}))
        weight_map.update(dict.fromkeys(group, name))
    total = sum(array.nbytes for array in arrays.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return directory
