"""Float64 references for causal attention with a distance bias, for testing any implementation.

`reference_attention` is exact by default (bias on every causal pair). Given `skip_distance` it
instead emulates the kernel's tile rule, dropping the bias on exactly the key blocks the kernel
skips, so a kernel can be held to dtype tolerance against one and to the skipping bound against
the other. Query rows are processed in chunks: memory is O(B * H * chunk * Lk).
"""

from __future__ import annotations

import math

import torch

from inference.kernels.blocks import COMPUTED, bias_tile_map, pick_blocks


def bias_for_pairs(vector: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    """vector[h, d] for each distance (any shape), 0 where d < 0 or past the vector's end."""
    inside = (distance >= 0) & (distance < vector.shape[1])
    values = vector[:, distance.clamp(0, vector.shape[1] - 1)]
    return torch.where(inside, values, torch.zeros((), dtype=vector.dtype, device=vector.device))


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    q_offset: int = 0,
    sm_scale: float | None = None,
    skip_distance: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    chunk: int = 256,
) -> torch.Tensor:
    """Float64 causal attention; query row i sits at position q_offset + i and sees keys j <= it.

    `bias` is [H, Lbias] over distance d = position - j. With `skip_distance` set, tiles the kernel
    skips get no bias (block sizes default to the kernel's own, `pick_blocks`); 0 means no bias.
    """
    q64, k64, v64 = (t.double() for t in (q, k, v))
    q_len, k_len, head_dim = q.shape[2], k.shape[2], q.shape[3]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    vector = bias.double().to(q.device) if bias is not None else None
    tiling = None  # the kernel's tile map and its block sizes, when it skips tiles
    if skip_distance is not None:
        tile_m, tile_n = pick_blocks(q_len, block_m, block_n)
        tiling = (
            bias_tile_map(q_len, k_len, q_offset, skip_distance, tile_m, tile_n).to(q.device),
            tile_m,
            tile_n,
        )
    cols = torch.arange(k_len, device=q.device)
    out = torch.empty(q64.shape, dtype=torch.float64, device=q.device)
    for start in range(0, q_len, chunk):
        rows = torch.arange(start, min(start + chunk, q_len), device=q.device)
        distance = (q_offset + rows)[:, None] - cols[None, :]
        scores = torch.einsum("bhid,bhjd->bhij", q64[:, :, rows], k64) * scale
        if vector is not None:
            pair_bias = bias_for_pairs(vector, distance)
            if tiling is not None:
                tiles, tile_m, tile_n = tiling
                computed = tiles[(rows // tile_m)[:, None], (cols // tile_n)[None, :]] == COMPUTED
                pair_bias = pair_bias * computed
            scores = scores + pair_bias
        scores = scores.masked_fill(distance < 0, float("-inf"))
        out[:, :, rows] = torch.softmax(scores, dim=-1) @ v64
    return out
