"""Causal attention with the relative-position bias, for both variants.

`baseline`: materialize the [H, Lq, Lk] bias and the causal mask, then scaled_dot_product_attention:
the conventional way, whose memory grows with L^2. `zero-layer`: add the bias only on key blocks that
hold some query-key pair closer than the skip distance, and no bias at all when the checkpoint's bias
is zeroed or erased. On a GPU that is the Triton kernel (inference.kernels); on a CPU, `blocked_attention`
below does the same math one query block at a time, never allocating more than H x block x Lk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from inference.bias import BiasPlan


@dataclass
class BlockCounts:
    """Key blocks that did bias work, and those that skipped it (graystack_attention_bias_blocks_total)."""

    computed: int = 0
    skipped: int = 0

    def add(self, other: BlockCounts) -> None:
        self.computed += other.computed
        self.skipped += other.skipped


def first_bias_block(query_start: int, skip_distance: int, block_n: int) -> int:
    """The first key block holding a pair closer than `skip_distance` to a query at `query_start` or later.

    Key block n spans keys [n*block_n, (n+1)*block_n); its closest pair to the query block is with
    the block's last key, at distance query_start - (n+1)*block_n + 1.
    """
    if skip_distance <= 0:
        return math.inf
    return max(0, math.ceil((query_start - skip_distance + 2) / block_n) - 1)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: BiasPlan,
    q_offset: int = 0,
    block_m: int = 64,
    block_n: int = 64,
) -> tuple[torch.Tensor, BlockCounts]:
    """q [B, H, Lq, D], k/v [B, H, Lk, D]; query row i sits at position q_offset + i."""
    _, _, q_len, head_dim = q.shape
    scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty_like(q)
    counts = BlockCounts()
    for start in range(0, q_len, block_m):
        stop = min(start + block_m, q_len)
        first_query, last_query = q_offset + start, q_offset + stop - 1
        visible = last_query + 1  # keys this block's queries may see
        scores = (
            torch.matmul(q[:, :, start:stop].float(), k[:, :, :visible].float().transpose(-1, -2)) * scale
        )
        positions = torch.arange(first_query, last_query + 1)[:, None]
        keys = torch.arange(visible)[None, :]
        blocks = math.ceil(visible / block_n)
        band = min(first_bias_block(first_query, plan.skip_distance, block_n), blocks)
        if band < blocks:
            band_keys = keys[:, band * block_n :]
            distance = (positions - band_keys).clamp(min=0)
            scores[..., band * block_n :] += plan.vector[:, distance].to(scores.dtype)
        counts.add(BlockCounts(computed=blocks - band, skipped=band))
        scores.masked_fill_(keys > positions, -math.inf)
        out[:, :, start:stop] = torch.matmul(torch.softmax(scores, dim=-1), v[:, :, :visible].float()).to(
            q.dtype
        )
    return out, counts


def materialized_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, q_offset: int = 0
) -> torch.Tensor:
    """The baseline: the [H, Lq, Lk] bias plus the causal mask as one dense mask, then SDPA."""
    q_len, k_len = q.shape[2], k.shape[2]
    positions = torch.arange(q_len)[:, None] + q_offset
    future = torch.arange(k_len)[None, :] > positions
    mask = torch.zeros(q.shape[1], q_len, k_len, dtype=q.dtype) if bias is None else bias.to(q.dtype).clone()
    mask.masked_fill_(future, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
