"""The corpus every machine has: the Python standard library's own source files.

Files are ordered and split by a hash of their path relative to the stdlib root, so the order and the
held-out split are the same on every machine with the same Python, whatever the file system lists first,
and a file's bytes are never on both sides. Each file is one document: BOS, then its bytes.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.config import BOS

SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "__pycache__", "idle_test"})
HELD_OUT_PER_MILLE = 100  # a tenth of the files, chosen by path hash


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _path_hash(relative: str) -> int:
    return int.from_bytes(hashlib.sha256(relative.encode()).digest()[:8], "big")


def stdlib_files(root: Path | None = None) -> list[str]:
    """Relative paths of the stdlib's own .py files (not installed packages, not its test suite),
    in hash order: deterministic, and a byte budget then samples the whole library, not one corner."""
    root = root or stdlib_root()
    names = (
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(root).parts)
    )
    return sorted(names, key=lambda name: (_path_hash(name), name))


def is_held_out(relative: str) -> bool:
    return _path_hash(relative) % 1000 < HELD_OUT_PER_MILLE


@dataclass(frozen=True)
class Split:
    """One side of the corpus: its files and their tokens, concatenated (int16 to keep it small)."""

    files: tuple[str, ...]
    tokens: torch.Tensor

    @property
    def size(self) -> int:
        return self.tokens.numel()


def load_split(held_out: bool, max_bytes: int, root: Path | None = None) -> Split:
    """The train (or held-out) files, in order, until `max_bytes` of tokens are collected."""
    root = root or stdlib_root()
    chosen, parts, total = [], [], 0
    for name in stdlib_files(root):
        if is_held_out(name) != held_out:
            continue
        data = (root / name).read_bytes()
        if not data:
            continue
        document = torch.cat(
            (torch.tensor([BOS]), torch.frombuffer(bytearray(data), dtype=torch.uint8).long())
        )
        document = document[: max_bytes - total]
        chosen.append(name)
        parts.append(document.to(torch.int16))
        total += document.numel()
        if total >= max_bytes:
            break
    if total < 2:
        raise ValueError(f"no {'held-out' if held_out else 'training'} files under {root}")
    return Split(tuple(chosen), torch.cat(parts))


def random_windows(split: Split, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """`batch` windows of length+1 tokens at random offsets: inputs are [:, :-1], targets [:, 1:]."""
    starts = torch.randint(0, split.size - length - 1, (batch,), generator=generator)
    return torch.stack([split.tokens[s : s + length + 1] for s in starts.tolist()]).long()


def even_windows(split: Split, count: int, length: int) -> torch.Tensor:
    """`count` windows of length+1 tokens spread evenly over the split: the same ones on every run."""
    if split.size < length + 1:
        raise ValueError(f"the held-out split has {split.size} tokens, fewer than one window of {length + 1}")
    starts = torch.linspace(0, split.size - length - 1, count).long()
    return torch.stack([split.tokens[s : s + length + 1] for s in starts.tolist()]).long()
