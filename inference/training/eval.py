"""Held-out quality of each checkpoint, measured through the serving path, against the baseline.

Each context length L gets its own windows of L+1 held-out bytes, spread evenly over the split; a
window's model input is its first L bytes and only the second half of the positions is scored, so
every scored byte has seen at least L/2 bytes of context. Bits per byte is the mean negative
log2-likelihood of the true next byte; agreement is the share of scored positions where a variant's
greedy (argmax) byte equals the baseline's. Logits come from `TinyDecoder.logits`, the code that
serves requests (the zero-layer's blocked, skipping attention included), not the training forward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from inference.checkpoint import load_model
from inference.model import TinyDecoder
from inference.training.data import Split, even_windows

CONTEXTS = (64, 256, 1024)
SCORED_BYTES = 8192  # per context length: windows = SCORED_BYTES / (L / 2)


@dataclass(frozen=True)
class Quality:
    name: str
    weight_status: str
    effective_window: int
    bits_per_byte: dict[int, float]
    agreement: dict[int, float]  # with the baseline's greedy next byte


def windows_for(split: Split, context: int, scored_bytes: int = SCORED_BYTES) -> torch.Tensor:
    return even_windows(split, max(1, scored_bytes // (context - context // 2)), context)


def score(model: TinyDecoder, windows: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(mean bits per byte, greedy bytes [N, L - L/2]) over each window's second half."""
    context = windows.shape[1] - 1
    first = context // 2
    total, greedy = 0.0, []
    for window in windows:
        logits = model.logits(window[:-1])[first:].float()
        total += float(F.cross_entropy(logits, window[first + 1 :], reduction="sum"))
        greedy.append(logits.argmax(dim=-1))
    return total / (math.log(2) * windows.shape[0] * (context - first)), torch.stack(greedy)


def evaluate(
    checkpoints: dict[str, tuple[Path, str]],
    split: Split,
    contexts: tuple[int, ...] = CONTEXTS,
    scored_bytes: int = SCORED_BYTES,
    reference: str = "baseline",
) -> list[Quality]:
    """Quality of each named (path, variant) checkpoint; agreement is with `reference`'s greedy bytes."""
    windows = {context: windows_for(split, context, scored_bytes) for context in contexts}
    order = [reference, *(name for name in checkpoints if name != reference)]
    reference_greedy: dict[int, torch.Tensor] = {}
    results = []
    for name in order:
        path, variant = checkpoints[name]
        loaded = load_model(path, variant)
        bits, agreement = {}, {}
        for context in contexts:
            bits[context], greedy = score(loaded.model, windows[context])
            reference_greedy.setdefault(context, greedy)
            agreement[context] = float((greedy == reference_greedy[context]).float().mean())
        results.append(Quality(name, loaded.status.status.value, loaded.model.skip_distance, bits, agreement))
    return results


def as_json(results: list[Quality]) -> list[dict[str, Any]]:
    return [asdict(result) for result in results]
