"""Which files hold a checkpoint's weights: one safetensors file, or a Hugging Face directory.

A directory is read through its `*.safetensors.index.json` (`weight_map`: tensor -> shard file), or
is one `model.safetensors`. What cannot be a complete safetensors checkpoint is decided here, before
any shard is opened: nothing there, an index or shard not fetched (absent, a Git LFS pointer), an index
that is not one, a pickle (refused, never run), GGUF.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from inference.weights.pickles import PICKLE_SUFFIXES, looks_pickled, refusal
from inference.weights.shards import LFS_POINTER
from inference.weights.status import BIAS_MARKER, WeightStatus

INDEX_SUFFIX = ".safetensors.index.json"
SHARD_NAME = re.compile(r"-(\d+)-of-(\d+)(-[0-9a-f]{8})?\.safetensors$")
SINGLE_FILE = "model.safetensors"


class Decided(Exception):
    """The status is known from the layout alone."""

    def __init__(self, status: WeightStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Layout:
    directory: Path  # where config.json would be
    shards: tuple[Path, ...]  # sorted by name
    weight_map: dict[str, str] | None  # tensor -> shard file name; None for a single file
    index: bytes = b""  # the index file as stored
    index_path: Path | None = None


def locate(path: Path) -> Layout:
    """The checkpoint's files; Decided when they cannot make a complete safetensors checkpoint."""
    if not path.exists():
        raise Decided(WeightStatus.MISSING, "no such file or directory")
    if path.is_dir():
        return _directory(path)
    if not path.is_file():
        raise Decided(WeightStatus.MISSING, "not a regular file or a directory")
    if path.name.endswith(INDEX_SUFFIX):
        return _indexed(path)
    _refuse_other_formats(path)
    return _part_of_sharded(path) or Layout(path.parent, (path,), None)


def _part_of_sharded(path: Path) -> Layout | None:
    """A shard is read as the checkpoint it belongs to: alone, it would read ERASED when the bias lies
    in another shard, or in one that never arrived."""
    for index in sorted(path.parent.glob(f"*{INDEX_SUFFIX}")):
        names_it = False
        with contextlib.suppress(Decided):
            names_it = path.name in _weight_map(index.name, index.read_bytes()).values()
        if names_it:
            return _indexed(index)
    numbered = SHARD_NAME.search(path.name)
    if numbered and int(numbered.group(2)) > 1:
        raise Decided(
            WeightStatus.MISSING,
            f"{path.name} is shard {int(numbered.group(1))} of {int(numbered.group(2))} and no index beside it "
            "names it: check the whole checkpoint directory",
        )
    return None


def _refuse_other_formats(path: Path) -> None:
    if path.suffix in PICKLE_SUFFIXES:
        raise Decided(WeightStatus.UNSUPPORTED, refusal(path))
    if path.suffix == ".gguf":
        raise Decided(
            WeightStatus.UNSUPPORTED, f"{path.name} is GGUF: the check reads safetensors checkpoints"
        )
    with path.open("rb") as handle:
        prefix = handle.read(16)
    if prefix.startswith(LFS_POINTER):
        raise Decided(
            WeightStatus.MISSING, f"{path.name} is a Git LFS pointer, not weights (was `git lfs pull` run?)"
        )
    if looks_pickled(prefix) and prefix[8:9] != b"{":  # a safetensors header starts with `{` at byte 8
        raise Decided(WeightStatus.UNSUPPORTED, refusal(path))


def _directory(directory: Path) -> Layout:
    indexes = sorted(directory.glob(f"*{INDEX_SUFFIX}"))
    if len(indexes) > 1:
        names = ", ".join(index.name for index in indexes)
        raise Decided(WeightStatus.CORRUPT, f"several indexes ({names}): which one is the checkpoint?")
    if indexes:
        return _indexed(indexes[0])
    files = sorted(directory.glob("*.safetensors"))
    single = [f for f in files if f.name == SINGLE_FILE] or (files if len(files) == 1 else [])
    if single:
        _refuse_other_formats(single[0])
        return Layout(directory, (single[0],), None)
    if files:
        raise Decided(
            WeightStatus.MISSING,
            f"{len(files)} .safetensors files and no *{INDEX_SUFFIX} to say which belong together "
            "(a partial download?)",
        )
    others = sorted(p for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES or p.suffix == ".gguf")
    if others:
        _refuse_other_formats(others[0])
    raise Decided(WeightStatus.MISSING, f"no weights: neither {SINGLE_FILE} nor an index")


def _indexed(index: Path) -> Layout:
    raw = index.read_bytes()
    if raw.startswith(LFS_POINTER):
        raise Decided(
            WeightStatus.MISSING,
            f"{index.name} is a Git LFS pointer, not the index (was `git lfs pull` run?)",
        )
    weight_map = _weight_map(index.name, raw)
    shard_names = sorted(set(weight_map.values()))
    missing = [name for name in shard_names if not (index.parent / name).is_file()]
    if missing:
        raise Decided(WeightStatus.MISSING, _missing_shards(missing, weight_map))
    return Layout(index.parent, tuple(index.parent / name for name in shard_names), weight_map, raw, index)


def _weight_map(name: str, raw: bytes) -> dict[str, str]:
    try:
        index = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Decided(WeightStatus.CORRUPT, f"{name} is not JSON: {error}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise Decided(WeightStatus.CORRUPT, f"{name} has no weight_map object")
    if not weight_map:
        raise Decided(WeightStatus.CORRUPT, f"{name} names no weights")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
            raise Decided(
                WeightStatus.CORRUPT,
                f"{name}: weight_map[{tensor!r}] is {shard!r}, not a shard file beside it",
            )
    return weight_map


def _missing_shards(missing: list[str], weight_map: dict[str, str]) -> str:
    """Which shards are not there, and a tensor each held (a bias tensor first: the one that matters)."""
    parts = []
    for shard in missing:
        held = sorted((BIAS_MARKER not in t, t) for t, s in weight_map.items() if s == shard)
        parts.append(f"{shard} (holds {len(held)} tensors, e.g. {held[0][1]})")
    return f"shards named in the index are not there: {'; '.join(parts)} (a partial download?)"
