"""The gated-bias attention's decode entry: one new query for each of N sequences of ragged lengths,
in one launch.

Continuous batching decodes every running sequence at once; the prefill kernel
(`gated_bias_attention`) takes one q_offset and one bias for a whole batch, so decode would need a
launch per sequence. Here each program is one (sequence, head): it reads its own position, skip
distance and bias row, walks its keys in BLOCK_N tiles with an online softmax (base 2, fp32), and
masks keys past its position (the padding of shorter sequences). Bias goes on the same tiles the
prefill kernel gives it for a single query at that position (`blocks.key_block_bounds` with one
query row): every key tile from the first one holding a pair closer than the skip distance, none
for a sequence whose skip distance is 0.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from inference.kernels.blocks import DEFAULT_BLOCK_N

LOG2E = 1.4426950408889634
HEAD_DIMS = (16, 32, 64, 128)


@triton.jit
def _gated_bias_decode_fwd(
    Q,
    K,
    V,
    Bias,
    Positions,
    SkipDistances,
    Out,
    stride_qn,
    stride_qh,
    stride_kn,
    stride_kh,
    stride_kl,
    stride_vn,
    stride_vh,
    stride_vl,
    stride_bn,
    stride_bh,
    stride_on,
    stride_oh,
    n_heads,
    bias_len,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    sequence = tl.program_id(0) // n_heads
    head = tl.program_id(0) % n_heads
    position = tl.load(Positions + sequence)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + sequence.to(tl.int64) * stride_qn + head * stride_qh + offs_d).to(tl.float32)
    k_base = K + sequence.to(tl.int64) * stride_kn + head.to(tl.int64) * stride_kh
    v_base = V + sequence.to(tl.int64) * stride_vn + head.to(tl.int64) * stride_vh
    if HAS_BIAS:
        skip = tl.load(SkipDistances + sequence)
        band_end = (position + 1) // BLOCK_N * BLOCK_N
        plain_end = tl.minimum(tl.maximum(position - skip + 1, 0) // BLOCK_N * BLOCK_N, band_end)
        plain_end = tl.where(skip > 0, plain_end, position + 1)  # no bias: every key is plain
        bias_row = Bias + sequence.to(tl.int64) * stride_bn + head.to(tl.int64) * stride_bh

    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
    l_i = tl.sum(tl.zeros([BLOCK_N], tl.float32), 0)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start in range(0, position + 1, BLOCK_N):
        cols = start + offs_n
        visible = cols <= position
        k = tl.load(k_base + cols[:, None] * stride_kl + offs_d[None, :], mask=visible[:, None], other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vl + offs_d[None, :], mask=visible[:, None], other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], axis=1) * qk_scale  # [BLOCK_N], base 2
        if HAS_BIAS:
            distance = position - cols
            biased = visible & (cols >= plain_end) & (distance < bias_len)
            index = tl.minimum(tl.maximum(distance, 0), bias_len - 1)
            bias = tl.load(bias_row + index, mask=biased, other=0.0)
            s += bias * 1.4426950408889634  # natural-log units to base 2
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        p = tl.math.exp2(s - m_new)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        m_i = m_new
    out = acc / l_i
    tl.store(
        Out + sequence.to(tl.int64) * stride_on + head * stride_oh + offs_d, out.to(Out.dtype.element_ty)
    )


def gated_bias_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    bias: torch.Tensor | None,
    skip_distances: torch.Tensor,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """q [N, H, D]; k, v [N, H, Lmax, D] padded; sequence i's query sits at `positions[i]` and sees
    keys 0..positions[i]. `bias[i, h, d]` ([N, H, Lbias], or [H, Lbias] shared by all) is added at
    distance d on the tiles described above, where `skip_distances[i]` > 0. Returns [N, H, D]."""
    count, heads, head_dim = q.shape
    if k.shape != v.shape or k.shape[:2] != (count, heads) or k.shape[3] != head_dim:
        raise ValueError(f"expected q [N,H,D] and k, v [N,H,L,D]; got {q.shape}, {k.shape}, {v.shape}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    if positions.shape != (count,) or int(positions.max()) >= k.shape[2]:
        raise ValueError(f"positions must be [N] and below the keys' length {k.shape[2]}")
    if not q.is_cuda and not isinstance(_gated_bias_decode_fwd, InterpretedFunction):
        raise RuntimeError("CPU tensors need TRITON_INTERPRET=1 set before triton is first imported")
    out = torch.empty_like(q)
    if bias is not None and bool((skip_distances > 0).any()):
        has_bias = True
        bias = bias.float()
        if bias.dim() == 2:
            bias = bias[None].expand(count, -1, -1)
    else:
        has_bias = False
        bias = q.new_zeros(1, 1, 1, dtype=torch.float32)  # never read
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    bias = bias if bias.stride(-1) == 1 else bias.contiguous()
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    _gated_bias_decode_fwd[(count * heads,)](
        q, k, v, bias, positions.to(device=q.device, dtype=torch.int32),
        skip_distances.to(device=q.device, dtype=torch.int32), out,
        q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        bias.stride(0), bias.stride(1),
        out.stride(0), out.stride(1),
        heads, bias.shape[2], scale * LOG2E,
        HEAD_DIM=head_dim, BLOCK_N=DEFAULT_BLOCK_N, HAS_BIAS=has_bias,
    )  # fmt: skip
    return out
