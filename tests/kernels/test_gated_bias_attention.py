"""The gated-bias attention (the Triton kernel, and the CPU path that serves without a GPU) against
float64 references built from the bias layer's raw weights.

Two references: the skip-emulated one (bias dropped on exactly the tiles the kernel skips) holds the
kernel to dtype tolerance, FlashAttention's convention: max|out - ref| <= 2 * max|out_pt - ref| + atol,
where out_pt is the same math in the same dtype in plain PyTorch. The exact one (bias on every pair)
holds it to the skipping bound: skipped tiles hold only pairs at distance >= skip_distance, where the
gate is below the threshold, so each dropped logit is off by at most eps = max|bias| over the skipped
pairs (<= threshold * max|table|). Softmax weights then move by a factor within [e^-eps, e^eps] each
and after renormalizing within [e^-2eps, e^2eps], so max|out - ref| <= (e^(2 eps) - 1) * max|v| plus
the dtype tolerance.
"""

from __future__ import annotations

import math
import zlib

import pytest
import torch
from torch.nn import functional as F

from inference.attention import blocked_attention
from inference.bias import BaselineBias, BiasPlan, ZeroLayerBias
from inference.config import ModelConfig
from inference.kernels.blocks import (
    COMPUTED,
    NOT_VISITED,
    SKIPPED,
    bias_block_counts,
    bias_tile_map,
    cdiv,
    pick_blocks,
)
from inference.kernels.gated_bias_attention import gated_bias_attention, skipped_blocks
from inference.kernels.reference import bias_for_pairs, reference_attention

MAX_SEQ_LEN = 1024
ATOL = {torch.float32: 1e-5, torch.float16: 1e-4}
NORM_RTOL = {torch.float32: 1e-5, torch.float16: 2e-3}  # DESIGN.md: ||out - ref|| / ||ref||
FP32, FP16 = torch.float32, torch.float16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU runs the Triton interpreter (conftest.py)


@pytest.fixture
def generator(request: pytest.FixtureRequest) -> torch.Generator:
    """Seeded per test case, so every parameter set draws its own inputs."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def kernel(q, k, v, bias, skip_distance, *args, **kwargs) -> torch.Tensor:
    """The kernel on DEVICE; its output comes back to the CPU, next to the references."""
    q, k, v = (t.to(DEVICE) for t in (q, k, v))
    bias = bias.to(DEVICE) if bias is not None else None
    return gated_bias_attention(q, k, v, bias, skip_distance, *args, **kwargs).cpu()


def cpu_path(q, k, v, bias, skip_distance, q_offset=0, block_m=None, block_n=None) -> torch.Tensor:
    """The CPU serving path (inference.attention.blocked_attention) behind the kernel's signature."""
    reach = q_offset + q.shape[2]
    if bias is None or skip_distance == 0:
        plan = BiasPlan.none()
    else:
        vector = F.pad(bias, (0, max(0, reach - bias.shape[1])))
        plan = BiasPlan(vector=vector, skip_distance=min(skip_distance, reach))
    return blocked_attention(q, k, v, plan, q_offset, block_m, block_n)[0]


@pytest.fixture(params=["triton", "cpu"])
def attention(request: pytest.FixtureRequest):
    """Both implementations of the zero-layer's attention pass the same tests."""
    return kernel if request.param == "triton" else cpu_path


def qkv(generator, batch, heads, length, head_dim, dtype):
    return [torch.randn(batch, heads, length, head_dim, generator=generator).to(dtype) for _ in range(3)]


def zero_layer(heads: int, window: int, gate: str, generator: torch.Generator) -> ZeroLayerBias:
    """The real bias module. gate: 'reset' (its own init), 'bumpy' (non-monotone: high, low, high,
    low over distance, random table) or 'one' (g == 1 everywhere)."""
    config = ModelConfig(d_model=16 * heads, n_heads=heads, max_seq_len=MAX_SEQ_LEN, bias_window=window)
    module = ZeroLayerBias(config)
    module.reset(generator)
    first, _, second = module.gate
    with torch.no_grad():
        if gate == "bumpy":
            centers = torch.tensor([window / 8, window / 4, window / 2])
            first.weight.zero_()
            first.bias.zero_()
            first.weight[:3] = 8.0
            first.bias[:3] = -8.0 * torch.log1p(centers)
            second.weight.zero_()
            second.weight[0, :3] = torch.tensor([-6.0, 6.0, -6.0])
            second.bias.fill_(0.3 * torch.randn((), generator=generator).item())
            module.table.normal_(0.0, 0.7, generator=generator)
        elif gate == "one":
            second.weight.zero_()
            second.bias.fill_(40.0)  # sigmoid(40) rounds to 1.0 in float64
    return module


def raw_vector(module: ZeroLayerBias) -> torch.Tensor:
    """Float64 [H, max_seq_len] bias over distance from the raw weights (not the float32 plan)."""
    gate = module.gate_values(module.max_seq_len, torch.float64).detach()
    table = module.table.detach().double()
    reach = min(module.window + 1, module.max_seq_len)
    vector = torch.zeros(table.shape[0], module.max_seq_len, dtype=torch.float64)
    vector[:, :reach] = gate[:reach] * table[:, module.window : module.window + reach]
    return vector


def same_dtype_attention(q, k, v, vector, q_offset, skip_distance, block_m, block_n):
    """The skip-emulated math with a materialized bias, in q's dtype: FlashAttention's out_pt."""
    q_len, k_len = q.shape[2], k.shape[2]
    distance = (q_offset + torch.arange(q_len))[:, None] - torch.arange(k_len)[None, :]
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if vector is not None:
        tiles = bias_tile_map(q_len, k_len, q_offset, skip_distance, block_m, block_n)
        computed = tiles[torch.arange(q_len)[:, None] // block_m, torch.arange(k_len)[None, :] // block_n]
        scores = scores + (bias_for_pairs(vector, distance) * (computed == COMPUTED)).to(q.dtype)
    scores = scores.masked_fill(distance < 0, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def skipped_bias_max(vector, q_len, k_len, q_offset, skip_distance, block_m, block_n) -> float:
    """eps: the largest |bias| the kernel drops, over causal pairs in skipped tiles."""
    distance = (q_offset + torch.arange(q_len))[:, None] - torch.arange(k_len)[None, :]
    tiles = bias_tile_map(q_len, k_len, q_offset, skip_distance, block_m, block_n)
    skipped = (
        tiles[torch.arange(q_len)[:, None] // block_m, torch.arange(k_len)[None, :] // block_n] == SKIPPED
    )
    dropped = bias_for_pairs(vector, distance).abs() * (skipped & (distance >= 0))
    return float(dropped.max())


def case_id(value) -> str | None:
    return {FP32: "fp32", FP16: "fp16"}.get(value) if isinstance(value, torch.dtype) else None


def check_tolerance(out, ref, out_pt) -> None:
    """FlashAttention's rule plus DESIGN.md's relative norm."""
    error = float((out.double() - ref).abs().max())
    error_pt = float((out_pt.double() - ref).abs().max())
    assert error <= 2 * error_pt + ATOL[out.dtype], (error, error_pt)
    assert float((out.double() - ref).norm() / ref.norm()) <= NORM_RTOL[out.dtype]


CASES = [
    # batch, heads, length, head_dim, dtype, window, gate, (block_m, block_n)
    (1, 1, 1, 64, FP32, 64, "reset", (16, 16)),
    (2, 2, 37, 32, FP32, 64, "bumpy", (16, 32)),
    (1, 2, 300, 64, FP16, 128, "reset", (32, 16)),
    (1, 1, 517, 128, FP32, 128, "bumpy", (64, 32)),
    (2, 1, 517, 64, FP16, 1024, "reset", (None, None)),
    (1, 2, 300, 128, FP16, 1024, "bumpy", (16, 16)),
    (1, 1, 300, 32, FP32, 1024, "reset", (None, None)),
    (1, 2, 517, 32, FP16, 64, "bumpy", (32, 64)),
]


@pytest.mark.parametrize(
    ("batch", "heads", "length", "head_dim", "dtype", "window", "gate", "blocks"), CASES, ids=case_id
)
def test_kernel_matches_both_references(
    attention, generator, batch, heads, length, head_dim, dtype, window, gate, blocks
):
    module = zero_layer(heads, window, gate, generator)
    plan = module.plan()
    vector = raw_vector(module)
    block_m, block_n = pick_blocks(length, *blocks)
    q, k, v = qkv(generator, batch, heads, length, head_dim, dtype)

    out = attention(q, k, v, plan.vector, plan.skip_distance, block_m=block_m, block_n=block_n)
    emulated = reference_attention(q, k, v, vector, 0, None, plan.skip_distance, block_m, block_n)
    exact = reference_attention(q, k, v, vector)
    out_pt = same_dtype_attention(q, k, v, vector, 0, plan.skip_distance, block_m, block_n)

    assert out.dtype == dtype
    check_tolerance(out, emulated, out_pt)
    eps = skipped_bias_max(vector, length, length, 0, plan.skip_distance, block_m, block_n)
    assert eps <= module.threshold * float(module.table.detach().abs().max()) + 1e-12
    bound = math.expm1(2 * eps) * float(v.double().abs().max())
    dtype_tolerance = 2 * float((out_pt.double() - emulated).abs().max()) + ATOL[dtype]
    assert float((out.double() - exact).abs().max()) <= bound + dtype_tolerance


@pytest.mark.parametrize(
    ("dtype", "q_len", "window", "gate", "blocks"),
    [
        (FP32, 1, 1024, "reset", (None, None)),
        (FP16, 5, 1024, "bumpy", (None, None)),
        (FP32, 5, 128, "reset", (16, 32)),
        (FP16, 1, 64, "bumpy", (None, 16)),
    ],
    ids=case_id,
)
def test_decode_matches_prefill_rows(attention, generator, dtype, q_len, window, gate, blocks):
    """Decode (q_offset = Lk - Lq) against the whole K/V gives the last rows of prefill. Its query
    block starts at another position than prefill's, so the tiles skipped may differ: then the rows
    agree within twice the skipping bound."""
    length, heads = 300, 2
    module = zero_layer(heads, window, gate, generator)
    plan = module.plan()
    vector = raw_vector(module)
    q, k, v = qkv(generator, 1, heads, length, 64, dtype)
    offset = length - q_len
    block_m, block_n = pick_blocks(q_len, *blocks)

    prefill = attention(q, k, v, plan.vector, plan.skip_distance, block_n=block_n)
    last = q[:, :, offset:]
    skip = plan.skip_distance
    decode = attention(last, k, v, plan.vector, skip, offset, block_m=block_m, block_n=block_n)
    emulated = reference_attention(last, k, v, vector, offset, None, skip, block_m, block_n)
    out_pt = same_dtype_attention(last, k, v, vector, offset, skip, block_m, block_n)
    check_tolerance(decode, emulated, out_pt)

    eps = max(
        skipped_bias_max(vector, q_len, length, offset, skip, block_m, block_n),
        skipped_bias_max(vector, length, length, 0, skip, *pick_blocks(length, None, block_n)),
    )
    if skip >= length:
        assert eps == 0.0
    bound = 2 * math.expm1(2 * eps) * float(v.double().abs().max())
    difference = float((decode.double() - prefill[:, :, offset:].double()).abs().max())
    assert difference <= bound + (1e-5 if dtype == FP32 else 2e-3)


@pytest.mark.parametrize("dtype", [FP32, FP16], ids=case_id)
def test_gate_one_without_skipping_is_the_baseline(attention, generator, dtype):
    """g == 1 and skip_distance >= L: every tile gets bias, and the math is the baseline's (a
    materialized [H, L, L] bias from a full table, plus SDPA with an explicit mask)."""
    length, heads, window = 200, 2, 256
    module = zero_layer(heads, window, "one", generator)
    plan = module.plan()
    assert plan.skip_distance >= length
    assert bool((module.gate_values(MAX_SEQ_LEN, torch.float64) == 1.0).all())
    assert bias_block_counts(length, 0, plan.skip_distance, *pick_blocks(length)).skipped == 0

    config = ModelConfig(d_model=16 * heads, n_heads=heads, max_seq_len=MAX_SEQ_LEN)
    baseline = BaselineBias(config)
    with torch.no_grad():
        baseline.table[:, : window + 1] = module.table[:, window:]
    q, k, v = qkv(generator, 2, heads, length, 64, dtype)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = baseline.materialize(0, length, length).detach().double().masked_fill(~causal, float("-inf"))
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)

    exact = reference_attention(q, k, v, raw_vector(module))
    torch.testing.assert_close(exact, expected, rtol=0, atol=1e-12)
    out = attention(q, k, v, plan.vector, plan.skip_distance)
    out_pt = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(dtype))
    check_tolerance(out, expected, out_pt)


@pytest.mark.parametrize(("how", "dtype"), [("none", FP32), ("zeroed", FP32), ("skip-0", FP16)], ids=case_id)
def test_no_bias_is_plain_causal_attention(attention, generator, how, dtype):
    """ERASED (no bias tensors: None), ZEROED (plan is none) and skip_distance 0 all run the
    no-bias specialization, bit for bit, and report every tile skipped."""
    length, heads = 300, 2
    q, k, v = qkv(generator, 1, heads, length, 64, dtype)
    if how == "zeroed":
        config = ModelConfig(d_model=16 * heads, n_heads=heads, max_seq_len=MAX_SEQ_LEN)
        plan = ZeroLayerBias(config).plan()
        bias, skip_distance = plan.vector, plan.skip_distance
        assert (bias, skip_distance) == (None, 0)
    elif how == "skip-0":
        bias, skip_distance = torch.randn(heads, MAX_SEQ_LEN, generator=generator), 0
    else:
        bias, skip_distance = None, 100

    out = attention(q, k, v, bias, skip_distance)
    assert torch.equal(out, attention(q, k, v, None, 0))
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(reference_attention(q, k, v, None), expected, rtol=0, atol=1e-12)
    out_pt = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    check_tolerance(out, expected, out_pt)

    effective = skip_distance if bias is not None else 0
    tiles = bias_tile_map(length, length, 0, effective, *pick_blocks(length))
    assert not bool((tiles == COMPUTED).any())
    counts = skipped_blocks(length, length, 0, effective)
    assert counts.computed == 0
    assert counts.skipped == int((tiles == SKIPPED).sum()) > 0


@pytest.mark.parametrize(
    ("q_len", "offset", "vector_len"), [(300, 0, MAX_SEQ_LEN), (5, 295, MAX_SEQ_LEN), (300, 0, 200)]
)
def test_band_edges_with_a_large_random_vector(attention, generator, q_len, offset, vector_len):
    """A bias of unit scale everywhere makes any misplaced band edge visible, and is far enough from
    the exact result that the check is sensitive. A vector shorter than the positions reads as zero
    past its end."""
    heads, skip_distance, (block_m, block_n) = 2, 40, (32, 16)
    vector = torch.randn(heads, vector_len, generator=generator)
    q, k, v = qkv(generator, 1, heads, offset + q_len, 32, FP32)
    q = q[:, :, offset:]
    out = attention(q, k, v, vector, skip_distance, offset, block_m=block_m, block_n=block_n)
    emulated = reference_attention(q, k, v, vector, offset, None, skip_distance, block_m, block_n)
    assert float((out.double() - emulated).abs().max()) <= ATOL[FP32]
    assert float((emulated - reference_attention(q, k, v, vector, offset)).abs().max()) > 1e-2


def brute_force_tiles(q_len, k_len, q_offset, skip_distance, block_m, block_n) -> torch.Tensor:
    """Enumerate every causal (query, key) pair and take each tile's smallest distance."""
    distance = (q_offset + torch.arange(q_len))[:, None] - torch.arange(k_len)[None, :]
    tile = (torch.arange(q_len) // block_m)[:, None] * cdiv(k_len, block_n) + torch.arange(k_len)[
        None, :
    ] // block_n
    causal = distance >= 0
    smallest = torch.full((cdiv(q_len, block_m) * cdiv(k_len, block_n),), 1 << 30, dtype=torch.int64)
    smallest.scatter_reduce_(0, tile[causal], distance[causal], reduce="amin")
    tiles = torch.where(smallest < skip_distance, COMPUTED, SKIPPED)
    tiles = torch.where(smallest == 1 << 30, NOT_VISITED, tiles)
    return tiles.to(torch.int8).view(cdiv(q_len, block_m), cdiv(k_len, block_n))


def test_tile_report_matches_brute_force():
    for block_m, block_n in [(16, 16), (16, 32), (32, 16), (64, 64)]:
        for q_len, extra in [(1, 0), (1, 77), (5, 200), (37, 0), (100, 0), (100, 31), (130, 3)]:
            for q_offset in {0, extra}:
                k_len = q_len + extra
                for skip_distance in (0, 1, 7, 16, 40, 129, 10_000):
                    args = (q_len, k_len, q_offset, skip_distance, block_m, block_n)
                    tiles = bias_tile_map(*args)
                    assert torch.equal(tiles, brute_force_tiles(*args)), args
                    counts = bias_block_counts(q_len, q_offset, skip_distance, block_m, block_n)
                    assert skipped_blocks(*args) == counts
                    assert counts.computed == int((tiles == COMPUTED).sum()), args
                    assert counts.skipped == int((tiles == SKIPPED).sum()), args


def test_rejects_what_it_cannot_run():
    q = torch.zeros(1, 1, 8, 64)
    with pytest.raises(ValueError, match="head_dim"):
        kernel(torch.zeros(1, 1, 8, 48), torch.zeros(1, 1, 8, 48), torch.zeros(1, 1, 8, 48), None, 0)
    with pytest.raises(ValueError, match="q_offset"):
        kernel(q, q, q, None, 0, q_offset=1)
    with pytest.raises(ValueError, match="skip_distance"):
        kernel(q, q, q, None, -1)
    with pytest.raises(ValueError, match="power of two"):
        kernel(q, q, q, None, 0, block_m=24)
    with pytest.raises(ValueError, match="bias"):
        kernel(q, q, q, torch.zeros(2, 8), 4)


def test_strided_layout(generator):
    """q, k, v as a model projects them, [B, L, H, D] viewed as [B, H, L, D]: strides, not copies."""
    plan = zero_layer(2, 64, "reset", generator).plan()
    q, k, v = (t.transpose(1, 2) for t in qkv(generator, 2, 100, 2, 64, FP32))
    out = kernel(q, k, v, plan.vector, plan.skip_distance)
    contiguous = [t.contiguous() for t in (q, k, v)]
    assert torch.equal(out, kernel(*contiguous, plan.vector, plan.skip_distance))
