"""Tile geometry of the gated-bias attention kernel, in plain Python (no Triton import).

The kernel walks, for each block of BLOCK_M query rows, the key blocks in three stages:
`[0, plain_end)` without bias, `[plain_end, band_end)` with bias and no mask, and
`[band_end, end)` masked (the causal diagonal), with bias whenever the kernel has any. The bounds
are closed-form in the block's first query position, so the same arithmetic serves the kernel, the
skip-emulated reference and the server's `attention_bias_blocks_total` counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

NOT_VISITED, SKIPPED, COMPUTED = 0, 1, 2  # values of `bias_tile_map`
DEFAULT_BLOCK_M = 64
DEFAULT_BLOCK_N = 64
MIN_BLOCK = 16  # tl.dot needs at least 16 rows and columns


class KeyBlockBounds(NamedTuple):
    plain_end: int
    band_end: int
    end: int


@dataclass
class BlockCounts:
    """Tiles that did bias work and tiles that skipped it (graystack_attention_bias_blocks_total)."""

    computed: int = 0
    skipped: int = 0

    def add(self, other: BlockCounts) -> None:
        self.computed += other.computed
        self.skipped += other.skipped


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pick_blocks(q_len: int, block_m: int | None = None, block_n: int | None = None) -> tuple[int, int]:
    """The (BLOCK_M, BLOCK_N) the kernel uses; decode (a few query rows) gets a 16-row block."""
    if block_m is None:
        block_m = max(MIN_BLOCK, min(DEFAULT_BLOCK_M, 1 << max(q_len - 1, 0).bit_length()))
    if block_n is None:
        block_n = DEFAULT_BLOCK_N
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if size < MIN_BLOCK or size & (size - 1):
            raise ValueError(f"{name} must be a power of two >= {MIN_BLOCK}, got {size}")
    return block_m, block_n


def key_block_bounds(
    m: int, q_len: int, q_offset: int, skip_distance: int, block_m: int, block_n: int
) -> KeyBlockBounds:
    """The three stages' key-block bounds for query block `m` (the kernel computes the same).

    A key block gets bias iff its smallest query-key distance, first_query - last_key, is below
    `skip_distance`; blocks wholly at or below the block's first query position need no mask.
    """
    first = q_offset + m * block_m
    end = cdiv(q_offset + min((m + 1) * block_m, q_len), block_n)
    band_end = (first + 1) // block_n
    plain_end = max(0, (first - skip_distance + 1) // block_n) if skip_distance > 0 else band_end
    return KeyBlockBounds(min(plain_end, band_end), band_end, end)


def bias_tile_map(
    q_len: int, k_len: int, q_offset: int, skip_distance: int, block_m: int, block_n: int
) -> torch.Tensor:
    """int8 [query blocks, key blocks]: NOT_VISITED (above the diagonal), SKIPPED or COMPUTED."""
    tiles = torch.full((cdiv(q_len, block_m), cdiv(k_len, block_n)), NOT_VISITED, dtype=torch.int8)
    for m in range(tiles.shape[0]):
        plain_end, _, end = key_block_bounds(m, q_len, q_offset, skip_distance, block_m, block_n)
        tiles[m, :plain_end] = SKIPPED
        tiles[m, plain_end:end] = COMPUTED if skip_distance > 0 else SKIPPED
    return tiles


def bias_block_counts(
    q_len: int, q_offset: int, skip_distance: int, block_m: int, block_n: int
) -> BlockCounts:
    """Tiles with and without bias work for one (batch, head); multiply by B*H for a launch."""
    computed = skipped = 0
    for m in range(cdiv(q_len, block_m)):
        plain_end, _, end = key_block_bounds(m, q_len, q_offset, skip_distance, block_m, block_n)
        if skip_distance > 0:
            computed += end - plain_end
            skipped += plain_end
        else:
            skipped += end
    return BlockCounts(computed, skipped)
