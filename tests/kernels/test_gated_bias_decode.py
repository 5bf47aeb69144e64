"""The kernel's decode entry (one launch for sequences of ragged lengths) against the prefill kernel
run one sequence at a time, and against the CPU serving path's batched decode (`decode_attention`)."""

from __future__ import annotations

import pytest
import torch

from inference.attention import decode_attention
from inference.kernels.blocks import key_block_bounds, pick_blocks
from inference.kernels.gated_bias_attention import gated_bias_attention
from inference.kernels.gated_bias_decode import gated_bias_decode

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU runs the Triton interpreter (conftest.py)
POSITIONS = [0, 63, 64, 130, 200, 257]
HEADS, HEAD_DIM, BIAS_LEN = 2, 32, 512


def inputs(seed: int, dtype: torch.dtype = torch.float32):
    generator = torch.Generator().manual_seed(seed)
    longest = max(POSITIONS) + 1
    q = torch.randn(len(POSITIONS), HEADS, HEAD_DIM, generator=generator).to(dtype)
    k, v = (
        torch.randn(len(POSITIONS), HEADS, longest, HEAD_DIM, generator=generator).to(dtype) for _ in "kv"
    )
    bias = 2 * torch.randn(len(POSITIONS), HEADS, BIAS_LEN, generator=generator)  # large at every distance
    return q, k, v, bias


def decode(q, k, v, bias, skips) -> torch.Tensor:
    to = {"device": DEVICE}
    positions = torch.tensor(POSITIONS)
    out = gated_bias_decode(q.to(**to), k.to(**to), v.to(**to), positions, bias.to(**to), torch.tensor(skips))
    return out.cpu()


@pytest.mark.parametrize("skips", [[0, 5, 20, 300, 64, 1], [0] * 6, [1000] * 6])
def test_one_launch_matches_the_prefill_kernel_one_sequence_at_a_time(skips):
    q, k, v, bias = inputs(1)
    got = decode(q, k, v, bias, skips)
    for i, (position, skip) in enumerate(zip(POSITIONS, skips, strict=True)):
        keys = k[i : i + 1, :, : position + 1].to(DEVICE)
        values = v[i : i + 1, :, : position + 1].to(DEVICE)
        alone = gated_bias_attention(
            q[i : i + 1, :, None].to(DEVICE), keys, values, bias[i].to(DEVICE), skip, q_offset=position
        )
        torch.testing.assert_close(got[i], alone[0, :, 0].cpu(), rtol=1e-4, atol=1e-5)


def test_it_matches_the_cpu_paths_batched_decode():
    q, k, v, bias = inputs(2)
    skips = [0, 5, 20, 300, 64, 1]
    block_m, block_n = pick_blocks(1)
    bias_from = [
        key_block_bounds(0, 1, position, skip, block_m, block_n).plain_end * block_n if skip else position + 1
        for position, skip in zip(POSITIONS, skips, strict=True)
    ]
    keys = [k[i, :, : p + 1] for i, p in enumerate(POSITIONS)]
    values = [v[i, :, : p + 1] for i, p in enumerate(POSITIONS)]
    expected = decode_attention(q, keys, values, torch.tensor(POSITIONS), bias, torch.tensor(bias_from))
    torch.testing.assert_close(decode(q, k, v, bias, skips), expected, rtol=1e-4, atol=1e-5)


def test_a_shared_bias_row_and_half_precision():
    q, k, v, bias = inputs(3, torch.float16)
    shared = bias[0]
    got = decode(q, k, v, shared[None].expand(len(POSITIONS), -1, -1), [20] * 6)
    torch.testing.assert_close(decode(q, k, v, shared, [20] * 6), got)
    assert got.dtype == torch.float16
    assert torch.isfinite(got).all()
