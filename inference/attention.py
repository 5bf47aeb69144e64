"""Causal attention with the relative-position bias, for both variants.

`baseline`: materialize the [H, Lq, Lk] bias and the causal mask, then scaled_dot_product_attention:
the conventional way, whose memory grows with L^2. `zero-layer`: add the bias only on key blocks that
hold some query-key pair closer than the skip distance, and no bias at all when the checkpoint's bias
is zeroed or erased. On a GPU that is the Triton kernel (inference.kernels); on a CPU, `blocked_attention`
below does the same math one query block at a time, never allocating more than H x block x Lk.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from inference.bias import BiasPlan
from inference.kernels.blocks import BlockCounts, bias_block_counts, key_block_bounds, pick_blocks


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: BiasPlan,
    q_offset: int = 0,
    block_m: int | None = None,
    block_n: int | None = None,
) -> tuple[torch.Tensor, BlockCounts]:
    """q [B, H, Lq, D], k/v [B, H, Lk, D]; query row i sits at position q_offset + i.

    The tiles that get bias are the Triton kernel's (same block sizes, same closed-form band), so
    both paths compute the same thing and report the same counts.
    """
    _, _, q_len, head_dim = q.shape
    block_m, block_n = pick_blocks(q_len, block_m, block_n)
    scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty_like(q)
    for m, start in enumerate(range(0, q_len, block_m)):
        stop = min(start + block_m, q_len)
        visible = q_offset + stop  # keys this block's queries may see
        scores = (
            torch.matmul(q[:, :, start:stop].float(), k[:, :, :visible].float().transpose(-1, -2)) * scale
        )
        positions = torch.arange(q_offset + start, q_offset + stop)[:, None]
        keys = torch.arange(visible)[None, :]
        if plan.skip_distance > 0:
            assert plan.vector is not None  # a plan with a skip distance has its vector
            band = (
                key_block_bounds(m, q_len, q_offset, plan.skip_distance, block_m, block_n).plain_end * block_n
            )
            distance = (positions - keys[:, band:]).clamp(min=0, max=plan.vector.shape[1] - 1)
            scores[..., band:] += plan.vector[:, distance].to(scores.dtype)
        scores.masked_fill_(keys > positions, -math.inf)
        out[:, :, start:stop] = torch.matmul(torch.softmax(scores, dim=-1), v[:, :, :visible].float()).to(
            q.dtype
        )
    return out, bias_block_counts(q_len, q_offset, plan.skip_distance, block_m, block_n)


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


def pad_ragged(
    keys: list[torch.Tensor], values: list[torch.Tensor], longest: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences' keys/values [H, L_i, D] as [N, H, longest, D], zero past each one's end."""
    heads, _, head_dim = keys[0].shape
    padded_keys = keys[0].new_zeros(len(keys), heads, longest, head_dim)
    padded_values = torch.zeros_like(padded_keys)
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        padded_keys[i, :, : k.shape[1]] = k
        padded_values[i, :, : v.shape[1]] = v
    return padded_keys, padded_values


def decode_attention(
    q: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    positions: torch.Tensor,
    vectors: torch.Tensor | None,
    bias_from: torch.Tensor,
) -> torch.Tensor:
    """One new query for each of N sequences of ragged lengths, in one call: [N, H, D] out.

    q [N, H, D]: sequence i's query sits at `positions[i]` and sees its keys/values [H, positions[i]
    + 1, D]. They are padded to the longest and masked, so the whole batch is two batched matmuls
    instead of a call per sequence. `vectors[i, h, d]` is sequence i's bias at distance d, added on
    keys from `bias_from[i]` on (the first key tile that gets bias work, as in the tiled paths;
    past the last key for a sequence with none); `vectors` None: no bias for any.
    """
    count, heads, head_dim = q.shape
    longest = int(positions.max()) + 1
    padded_keys, padded_values = pad_ragged(keys, values, longest)
    scores = torch.einsum("nhd,nhld->nhl", q.float(), padded_keys.float()) / math.sqrt(head_dim)
    columns = torch.arange(longest, device=q.device)
    distance = positions[:, None] - columns[None, :]  # [N, L]; negative past a sequence's end
    if vectors is not None:
        index = distance.clamp(min=0, max=vectors.shape[2] - 1)[:, None, :].expand(count, heads, longest)
        biased = (columns[None, :] >= bias_from[:, None])[:, None, :]
        scores = scores + vectors.gather(2, index).to(scores.dtype) * biased
    scores.masked_fill_((distance < 0)[:, None, :], -math.inf)
    out = torch.einsum("nhl,nhld->nhd", torch.softmax(scores, dim=-1), padded_values.float())
    return out.to(q.dtype)
