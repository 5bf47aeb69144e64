"""Fused causal flash-attention forward with the zero-layer's gated relative-position bias.

FlashAttention-2 online softmax in base 2 with fp32 accumulation. The bias arrives folded into a
per-head vector over distance (`BiasPlan.vector`) plus a skip distance. Each query block walks its
key blocks in three compile-time-specialized loops (see `blocks.py`): plain blocks far from the
diagonal, the bias band, and the masked diagonal blocks. No loop carries a per-iteration branch,
and a checkpoint without bias runs exactly plain causal flash attention.

Approximation (documented, by design): a key block whose every query-key pair has distance
>= skip_distance gets no bias, though the gate there is only below the threshold, not zero; a
block that gets bias adds it on every pair, including pairs beyond the skip distance.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch.nn import functional as F
from triton.runtime.interpreter import InterpretedFunction

from inference.kernels.blocks import BlockCounts, bias_block_counts, cdiv, pick_blocks

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)  # scores run in base 2, for exp2
HEAD_DIMS = (32, 64, 128)


@triton.jit
def _attend_blocks(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    bias_row,
    positions,
    lo,
    hi,
    k_len,
    stride_kn,
    stride_vn,
    stride_bd,
    qk_scale,
    offs_n,
    offs_d,
    BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    MASKED: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Online softmax over key blocks [lo, hi) (in key positions); flags fixed at compile time."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :]
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < k_len, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < k_len, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if HAS_BIAS or MASKED:
            distance = positions[:, None] - cols[None, :]
        if HAS_BIAS:
            # The bias (natural-log units) must enter before the row max is taken, so scale first.
            if MASKED:
                bias = tl.load(bias_row + tl.maximum(distance, 0) * stride_bd)
            else:
                bias = tl.load(bias_row + distance * stride_bd)
            s = s * qk_scale + bias * LOG2E
            scale = 1.0
        else:
            # Without bias the max commutes with the positive scale: one FMA per score, as the
            # Triton tutorial does.
            scale = qk_scale
        if MASKED:
            s = tl.where(distance >= 0, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
        p = tl.math.exp2(s * scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


# Lengths and offsets change every decode step: specializing on them (== 1, divisible by 16)
# would compile new variants mid-serving for no gain.
@triton.jit(do_not_specialize=["q_len", "k_len", "q_offset", "skip_distance"])
def _gated_bias_attention_fwd(
    Q,
    K,
    V,
    Bias,
    Out,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_om,
    stride_bh,
    stride_bd,
    n_heads,
    q_len,
    k_len,
    q_offset,
    skip_distance,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    # The longest query blocks (most key blocks) start first, which evens out the causal tail.
    m = tl.num_programs(0) - 1 - tl.program_id(0)
    batch = tl.program_id(1) // n_heads
    head = tl.program_id(1) % n_heads
    q_base = Q + batch.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
    k_base = K + batch.to(tl.int64) * stride_kb + head.to(tl.int64) * stride_kh
    v_base = V + batch.to(tl.int64) * stride_vb + head.to(tl.int64) * stride_vh
    o_base = Out + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
    bias_row = Bias + head.to(tl.int64) * stride_bh

    offs_m = m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # Rows past q_len repeat the last query, so every load stays in bounds without a mask. Head
    # dimension strides are 1 (the wrapper sees to it).
    rows = tl.minimum(offs_m, q_len - 1)
    positions = q_offset + rows
    q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :])

    # Key-block bounds, as in blocks.key_block_bounds (in key positions, not block indices).
    first = q_offset + m * BLOCK_M
    end = q_offset + tl.minimum((m + 1) * BLOCK_M, q_len)
    band_end = (first + 1) // BLOCK_N * BLOCK_N
    if HAS_BIAS:
        plain_end = tl.minimum(tl.maximum(first - skip_distance + 1, 0) // BLOCK_N * BLOCK_N, band_end)
    else:
        plain_end = band_end

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q, k_base, v_base, bias_row, positions, 0, plain_end, k_len,
        stride_kn, stride_vn, stride_bd, qk_scale, offs_n, offs_d,
        BLOCK_N, False, False, DOT_PRECISION,
    )  # fmt: skip
    if HAS_BIAS:
        acc, l_i, m_i = _attend_blocks(
            acc, l_i, m_i, q, k_base, v_base, bias_row, positions, plain_end, band_end, k_len,
            stride_kn, stride_vn, stride_bd, qk_scale, offs_n, offs_d,
            BLOCK_N, True, False, DOT_PRECISION,
        )  # fmt: skip
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q, k_base, v_base, bias_row, positions, band_end, end, k_len,
        stride_kn, stride_vn, stride_bd, qk_scale, offs_n, offs_d,
        BLOCK_N, HAS_BIAS, True, DOT_PRECISION,
    )  # fmt: skip

    out = acc / l_i[:, None]
    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < q_len)


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int) -> None:
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4:
        raise ValueError(f"expected q [B,H,Lq,D] and k, v [B,H,Lk,D]; got {q.shape}, {k.shape}, {v.shape}")
    if q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch, heads or head_dim")
    if q.shape[3] not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {q.shape[3]}")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q, k, v must share one of fp16/bf16/fp32; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q_offset < 0 or q_offset + q.shape[2] > k.shape[2]:
        raise ValueError(
            f"need 0 <= q_offset and q_offset + Lq <= Lk; got {q_offset}, {q.shape[2]}, {k.shape[2]}"
        )
    if not q.is_cuda and not isinstance(_gated_bias_attention_fwd, InterpretedFunction):
        raise RuntimeError("CPU tensors need TRITON_INTERPRET=1 set before triton is first imported")


def _bias_operand(bias: torch.Tensor, n_heads: int, positions: int) -> torch.Tensor:
    """The float32 [H, >= positions] vector the kernel reads; distances past its end get no bias."""
    if bias.dim() != 2 or bias.shape[0] != n_heads:
        raise ValueError(f"bias must be [H={n_heads}, Lbias], got {tuple(bias.shape)}")
    bias = bias.float()
    if bias.shape[1] < positions:
        bias = F.pad(bias, (0, positions - bias.shape[1]))
    return bias


def gated_bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    skip_distance: int,
    q_offset: int = 0,
    sm_scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Causal attention where query row i (position q_offset + i) sees keys j <= q_offset + i.

    `bias[h, d]` is added to the score of a query and a key d positions before it, in key blocks
    that hold a pair closer than `skip_distance`. `bias is None` or `skip_distance == 0` runs the
    no-bias specialization. Prefill: q_offset=0, Lq=Lk; decode: q_offset = Lk - Lq. Which tiles
    got bias: `skipped_blocks` with the same arguments (or `blocks.bias_tile_map` for the map).
    """
    _check_inputs(q, k, v, q_offset)
    if skip_distance < 0:
        raise ValueError(f"skip_distance must be >= 0, got {skip_distance}")
    batch, n_heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    block_m, block_n = pick_blocks(q_len, block_m, block_n)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q_len == 0:
        return out
    if bias is not None and skip_distance > 0:
        has_bias = True
        bias = _bias_operand(bias.to(q.device), n_heads, q_offset + q_len)
        skip_distance = min(skip_distance, q_offset + q_len)  # past every distance: all tiles get bias
    else:
        has_bias = False
        bias, skip_distance = q, 0  # never read: the no-bias specialization has no bias loads
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    grid = (cdiv(q_len, block_m), batch * n_heads)
    _gated_bias_attention_fwd[grid](
        q, k, v, bias, out,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        bias.stride(0), bias.stride(1),
        n_heads, q_len, k_len, q_offset, skip_distance, scale * LOG2E.value,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, HAS_BIAS=has_bias,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=8 if block_m >= 128 else 4, num_stages=2 if q.dtype == torch.float32 else 3,
    )  # fmt: skip
    return out


def skipped_blocks(
    q_len: int,
    k_len: int,
    q_offset: int,
    skip_distance: int,
    block_m: int | None = None,
    block_n: int | None = None,
) -> BlockCounts:
    """(computed, skipped) tiles of one `gated_bias_attention` call, per batch row and head.

    Pass skip_distance 0 for a call without bias (then every tile is skipped)."""
    if q_offset < 0 or q_offset + q_len > k_len:
        raise ValueError(f"need 0 <= q_offset and q_offset + Lq <= Lk; got {q_offset}, {q_len}, {k_len}")
    return bias_block_counts(q_len, q_offset, skip_distance, *pick_blocks(q_len, block_m, block_n))
