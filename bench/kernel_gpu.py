"""GPU benchmark: the gated-bias attention kernel against SDPA and the materialized-bias baseline.

Run from the repository root on a machine with a CUDA GPU (about 2-4 minutes on an H200):

    python -m bench.kernel_gpu
    python -m bench.kernel_gpu --lengths 1024,4096 --head-dims 128 --budget-s 120

Without a CUDA device it prints "no CUDA device: skipped" and exits 0.

1. Correctness gate, before any timing: the kernel in bf16 against the float64 chunked reference
   (`inference.kernels.reference`) at L <= 4K, skip-emulated (FlashAttention's rule: max error at most
   twice that of naive bf16 PyTorch, plus atol) and exact (within the skipping bound), decode against
   the reference, and the kernel against the baseline (materialized bias + SDPA) at 4K. A failed gate
   writes the JSON and exits 1 without timing.
2. Timing, triton.testing.do_bench medians: bf16, causal, B=1, H=32, head_dim 64 and 128, L 1K..32K:
   ours with the model's bias (W=128) and skipping, ours with a wide bias (W=8192) and skipping,
   ours with skipping disabled (skip_distance = L), ours erased (no bias), SDPA without bias
   (is_causal; flash and cuDNN backends forced), and the baseline: a [1, H, L, L] bf16 bias with the
   causal mask folded in + SDPA(attn_mask) on the forced efficient backend, attention only and
   including building the bias on the GPU. Plus a block-size sweep of ours at one length.

Per cell: median ms, effective TFLOP/s at full causal attention FLOPs (2*2*B*H*L^2*D*0.5, skipped bias
work counted as done, so variants compare), its share of 989.4 TFLOP/s (the datasheet dense BF16
tensor peak of the H100 SXM and H200 SXM), torch.cuda.max_memory_allocated, the fraction of tiles
without bias work, and "OOM" as a result where memory runs out. Results go to $OUT/kernel_gpu.json when
OUT is set, else bench/results/kernel_gpu.json, rewritten after every length.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
from torch import Tensor
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from inference.bias import BaselineBias, BiasPlan, ZeroLayerBias
from inference.config import ModelConfig
from inference.kernels.blocks import COMPUTED, bias_block_counts, bias_tile_map, pick_blocks
from inference.kernels.gated_bias_attention import gated_bias_attention
from inference.kernels.reference import bias_for_pairs, reference_attention

PEAK_TFLOPS = 989.4  # dense BF16 tensor peak, H100 SXM and H200 SXM (datasheet)
BATCH, HEADS = 1, 32
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
HEAD_DIMS = (64, 128)
WIDE_WINDOW = 8192
SWEEP_LENGTH, SWEEP_HEAD_DIM = 8192, 128
BLOCK_SWEEP = ((128, 64), (128, 32), (64, 32))
DEVICE, DTYPE = "cuda", torch.bfloat16
QUANTILES = [0.2, 0.5, 0.8]
CUDAGRAPH_MAX_LENGTH = 2048
BF16_ATOL = 1e-3
BF16_NORM_RTOL = 1e-2
RESULTS = Path(__file__).resolve().parent / "results"


def causal_flops(length: int, head_dim: int) -> float:
    return 2 * 2 * BATCH * HEADS * length**2 * head_dim * 0.5


def zero_layer_plan(window: int, max_len: int, device: torch.device) -> tuple[BiasPlan, ZeroLayerBias]:
    config = ModelConfig(d_model=HEADS * 64, n_heads=HEADS, max_seq_len=max_len, bias_window=window)
    module = ZeroLayerBias(config)
    module.reset(torch.Generator().manual_seed(window))
    plan = module.plan()
    assert plan.vector is not None  # a window > 0: a bias vector
    return BiasPlan(vector=plan.vector.to(device), skip_distance=plan.skip_distance), module


def raw_vector(module: ZeroLayerBias, device: torch.device) -> torch.Tensor:
    """Float64 bias over distance from the raw weights, independent of the float32 plan."""
    gate = module.gate_values(module.max_seq_len, torch.float64).detach()
    table = module.table.detach().double()
    reach = min(module.window + 1, module.max_seq_len)
    vector = torch.zeros(table.shape[0], module.max_seq_len, dtype=torch.float64)
    vector[:, :reach] = gate[:reach] * table[:, module.window : module.window + reach]
    return vector.to(device)


def baseline_table(max_len: int, device: torch.device) -> torch.Tensor:
    module = BaselineBias(ModelConfig(d_model=HEADS * 64, n_heads=HEADS, max_seq_len=max_len))
    module.reset(torch.Generator().manual_seed(0))
    return module.table.detach().to(device)


def build_baseline_mask(table: torch.Tensor, length: int) -> torch.Tensor:
    """BaselineBias.materialize on the GPU, in the table's dtype, with -inf above the diagonal.

    Lean on memory (index, then gather, then an in-place fill): at L=32K, H=32 the bf16 result is
    64 GiB and the int64 index 8 GiB."""
    positions = torch.arange(length, device=table.device)
    distance = positions[:, None] - positions[None, :]
    future = distance < 0
    bias = table[:, distance.clamp_(0, table.shape[1] - 1)]
    del distance
    return bias.masked_fill_(future, float("-inf"))[None]


def pair_bias(
    vector: Tensor, q_len: int, k_len: int, q_offset: int, skip_distance: int | None, dtype: torch.dtype
) -> Tensor:
    """[H, Lq, Lk] bias with the kernel's tile skipping (None: every pair) and -inf above the diagonal."""
    device = vector.device
    rows, cols = torch.arange(q_len, device=device), torch.arange(k_len, device=device)
    distance = (q_offset + rows)[:, None] - cols[None, :]
    bias = bias_for_pairs(vector.double(), distance)
    if skip_distance is not None:
        block_m, block_n = pick_blocks(q_len)
        tiles = bias_tile_map(q_len, k_len, q_offset, skip_distance, block_m, block_n).to(device)
        bias = bias * (tiles[(rows // block_m)[:, None], (cols // block_n)[None, :]] == COMPUTED)
    return bias.masked_fill(distance < 0, float("-inf")).to(dtype)


def naive_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """The same math in q's dtype, unfused: FlashAttention's out_pt."""
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    return torch.softmax(scores, dim=-1) @ v


def compare(out: Tensor, ref: Tensor, out_pt: Tensor) -> dict[str, Any]:
    """FlashAttention's rule, max|out - ref| <= 2 max|out_pt - ref| + atol, and the relative norm."""
    error = float((out.double() - ref).abs().max())
    error_pt = float((out_pt.double() - ref).abs().max())
    limit = 2 * error_pt + BF16_ATOL
    relative = float((out.double() - ref).norm() / ref.norm())
    ok = bool(torch.isfinite(out).all()) and error <= limit and relative <= BF16_NORM_RTOL
    return {"max_err": error, "max_err_naive_bf16": error_pt, "limit": limit, "rel_norm": relative, "ok": ok}


def fresh_output_poison(like: torch.Tensor) -> None:
    """Leave NaN in the allocator's cached block the kernel's output will reuse: unwritten shows up."""
    poison = torch.full_like(like, float("nan"))
    del poison


def qkv(length: int, head_dim: int, seed: int, device: torch.device) -> list[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(seed)
    shape = (BATCH, HEADS, length, head_dim)
    return [torch.randn(shape, generator=generator, device=device, dtype=DTYPE) for _ in range(3)]


def gate_case(
    name: str, q: Tensor, k: Tensor, v: Tensor, plan: BiasPlan, vector: Tensor, q_offset: int = 0
) -> dict[str, Any]:
    """Kernel vs skip-emulated (dtype rule) and exact (plus the skipping bound) float64 references."""
    q_len, k_len = q.shape[2], k.shape[2]
    fresh_output_poison(q)
    out = gated_bias_attention(q, k, v, plan.vector, plan.skip_distance, q_offset=q_offset)
    emulated = reference_attention(q, k, v, vector, q_offset, None, plan.skip_distance)
    exact = reference_attention(q, k, v, vector, q_offset)
    out_pt = naive_attention(q, k, v, pair_bias(vector, q_len, k_len, q_offset, plan.skip_distance, q.dtype))
    dropped = pair_bias(vector, q_len, k_len, q_offset, None, torch.float64) - pair_bias(
        vector, q_len, k_len, q_offset, plan.skip_distance, torch.float64
    )
    eps = float(dropped.nan_to_num(0.0).abs().max())
    bound = math.expm1(2 * eps) * float(v.double().abs().max())
    emulated_check = compare(out, emulated, out_pt)
    exact_error = float((out.double() - exact).abs().max())
    exact_limit = bound + emulated_check["limit"]  # the skipping bound plus the dtype tolerance
    vs_exact = {
        "max_err": exact_error,
        "skip_bound": bound,
        "limit": exact_limit,
        "ok": exact_error <= exact_limit,
    }
    result = {
        "case": name,
        "skip_distance": plan.skip_distance,
        "vs_skip_emulated": emulated_check,
        "vs_exact": vs_exact,
        "ok": emulated_check["ok"] and vs_exact["ok"],
    }
    return result


def causal_fill(length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    future = torch.ones(length, length, dtype=torch.bool, device=device).triu(1)
    return torch.zeros(length, length, dtype=dtype, device=device).masked_fill(future, float("-inf"))


def baseline_case(head_dim: int, q: Tensor, k: Tensor, v: Tensor, table: Tensor) -> dict[str, Any]:
    """Our kernel with the full table and no skipping is the baseline's math: compare the two, and
    check that the GPU mask builder is BaselineBias.materialize plus the causal fill."""
    length = q.shape[2]
    module = BaselineBias(ModelConfig(d_model=HEADS * 64, n_heads=HEADS, max_seq_len=table.shape[1]))
    with torch.no_grad():
        module.table.copy_(table.cpu())
    mask = build_baseline_mask(table.to(q.dtype), length)
    materialized = module.materialize(0, length, length).detach().to(device=q.device, dtype=q.dtype)
    same_build = torch.equal(mask[0], materialized + causal_fill(length, q.device, q.dtype))
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        baseline = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ours = gated_bias_attention(q, k, v, table, length)
    exact = reference_attention(q, k, v, table)
    out_pt = naive_attention(q, k, v, pair_bias(table, length, length, 0, None, q.dtype))
    versus = compare(ours, baseline.double(), out_pt)
    versus["max_err_naive_bf16"] = float((out_pt.double() - exact).abs().max())
    versus["limit"] = 2 * versus["max_err_naive_bf16"] + BF16_ATOL
    versus["ok"] = versus["max_err"] <= versus["limit"]
    case: dict[str, Any] = {
        "case": f"d{head_dim} L{length} vs baseline",
        "ours_vs_exact": compare(ours, exact, out_pt),
        "baseline_vs_exact": compare(baseline, exact, out_pt),
        "ours_vs_baseline": versus,
        "gpu_mask_build_matches_materialize": same_build,
    }
    case["ok"] = case["ours_vs_exact"]["ok"] and versus["ok"] and same_build
    return case


def erased_case(head_dim: int, q: Tensor, k: Tensor, v: Tensor) -> dict[str, Any]:
    """No bias: plain causal flash attention, next to SDPA's flash backend."""
    length = q.shape[2]
    erased = gated_bias_attention(q, k, v, None, 0)
    exact = reference_attention(q, k, v, None)
    result = compare(erased, exact, naive_attention(q, k, v, causal_fill(length, q.device, q.dtype)))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    result["sdpa_flash_max_err"] = float((sdpa.double() - exact).abs().max())
    return {"case": f"d{head_dim} L{length} erased", "vs_exact": result, "ok": result["ok"]}


def correctness_gate(device: torch.device, head_dims: tuple[int, ...]) -> dict[str, Any]:
    model_plan, model = zero_layer_plan(ModelConfig().bias_window, 4096, device)
    wide_plan, wide = zero_layer_plan(WIDE_WINDOW, 4096, device)
    model_vector, wide_vector = raw_vector(model, device), raw_vector(wide, device)
    table = baseline_table(4096, device)
    cases = []
    for head_dim in head_dims:
        q, k, v = qkv(1000, head_dim, 1, device)
        cases.append(gate_case(f"d{head_dim} L{q.shape[2]} model bias", q, k, v, model_plan, model_vector))
        q, k, v = qkv(4096, head_dim, 2, device)
        cases.append(gate_case(f"d{head_dim} L{q.shape[2]} wide bias", q, k, v, wide_plan, wide_vector))
        last = q.shape[2] - 1
        cases.append(
            gate_case(
                f"d{head_dim} decode 1 of {q.shape[2]}", q[:, :, last:], k, v, wide_plan, wide_vector, last
            )
        )
        cases.append(baseline_case(head_dim, q, k, v, table))
        cases.append(erased_case(head_dim, q, k, v))
        gc.collect()
        torch.cuda.empty_cache()
    return {"ok": all(c["ok"] for c in cases), "cases": cases}


Setup = Callable[[], tuple[Callable[[], torch.Tensor], dict[str, Any]]]


def variants(
    length: int, head_dim: int, plans: dict[str, BiasPlan], table: Tensor, device: torch.device
) -> dict[str, tuple[Setup, SDPBackend | None]]:
    """name -> (setup returning the timed call and what to record, the SDPA backend to force).
    Setups run lazily, inside the OOM guard: the baseline's mask is 64 GiB at 32K."""
    q, k, v = qkv(length, head_dim, length + head_dim, device)

    def ours(
        plan: BiasPlan | None, skip_distance: int, blocks: tuple[int | None, int | None] = (None, None)
    ) -> tuple[Setup, None]:
        bias = plan.vector if plan is not None else None
        skip = skip_distance if bias is not None else 0
        block_m, block_n = pick_blocks(length, *blocks)
        counts = bias_block_counts(length, 0, skip, block_m, block_n)
        info = {
            "skip_distance": skip,
            "blocks": [block_m, block_n],
            "blocks_skipped_fraction": round(counts.skipped / (counts.computed + counts.skipped), 4),
        }

        def run() -> Tensor:
            return gated_bias_attention(q, k, v, bias, skip, block_m=block_m, block_n=block_n)

        return (lambda: (run, info)), None

    def sdpa(backend: SDPBackend) -> tuple[Setup, SDPBackend]:
        def run() -> Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return (lambda: (run, {"backend": backend.name})), backend

    def baseline(include_build: bool) -> tuple[Setup, SDPBackend]:
        def setup() -> tuple[Callable[[], Tensor], dict[str, Any]]:
            bf16_table = table[:, :length].to(DTYPE)
            if include_build:

                def run() -> Tensor:
                    mask = build_baseline_mask(bf16_table, length)
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

            else:
                prebuilt = build_baseline_mask(bf16_table, length)

                def run() -> Tensor:
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=prebuilt)

            return run, {"backend": SDPBackend.EFFICIENT_ATTENTION.name}

        return setup, SDPBackend.EFFICIENT_ATTENTION

    cells = {
        "ours_bias_model": ours(plans["model"], plans["model"].skip_distance),
        "ours_bias_wide": ours(plans["wide"], plans["wide"].skip_distance),
        "ours_noskip": ours(plans["model"], length),
        "ours_erased": ours(None, 0),
        "sdpa_flash_nobias": sdpa(SDPBackend.FLASH_ATTENTION),
        "sdpa_cudnn_nobias": sdpa(SDPBackend.CUDNN_ATTENTION),
        "baseline_attention_only": baseline(include_build=False),
        "baseline_build_and_attention": baseline(include_build=True),
    }
    if (length, head_dim) == (SWEEP_LENGTH, SWEEP_HEAD_DIM):
        for blocks in BLOCK_SWEEP:
            tag = f"@{blocks[0]}x{blocks[1]}"
            cells["ours_bias_wide" + tag] = ours(plans["wide"], plans["wide"].skip_distance, blocks)
            cells["ours_erased" + tag] = ours(None, 0, blocks)
    return cells


def measure(fn: Callable[[], Tensor], length: int) -> tuple[list[float], str]:
    """p20, median, p80 in ms. Short lengths replay a CUDA graph, else launch overhead is timed."""
    if length <= CUDAGRAPH_MAX_LENGTH:
        with contextlib.suppress(RuntimeError):  # a call that cannot be captured: time it plainly
            return triton.testing.do_bench_cudagraph(fn, rep=100, quantiles=QUANTILES), "cudagraph"
    return triton.testing.do_bench(fn, quantiles=QUANTILES), "events"


def time_cell(setup: Setup, backend: SDPBackend | None, length: int, head_dim: int) -> dict[str, Any]:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    fn = None
    try:
        with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
            fn, info = setup()
            (low, median, high), timer = measure(fn, length)
        tflops = causal_flops(length, head_dim) / (median * 1e-3) / 1e12
        return {
            "result": "ok",
            "median_ms": round(median, 4),
            "p20_ms": round(low, 4),
            "p80_ms": round(high, 4),
            "timer": timer,
            "tflops": round(tflops, 1),
            "share_of_peak": round(tflops / PEAK_TFLOPS, 4),
            "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
            **info,
        }
    except torch.cuda.OutOfMemoryError:
        return {"result": "OOM", "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}
    except Exception as error:  # a forced SDPA backend that cannot run this shape, out of shared memory
        return {"result": f"error: {type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    finally:
        del fn
        gc.collect()
        torch.cuda.empty_cache()


def ratios(cells: dict[str, Any]) -> dict[str, Any]:
    """Side-by-side ratios within one (head_dim, L): median ms of the first over the second."""

    def ms(name: str) -> float | None:
        cell = cells.get(name, {})
        return cell.get("median_ms") if cell.get("result") == "ok" else None

    pairs = {
        "erased_over_bias_model": ("ours_erased", "ours_bias_model"),
        "erased_over_noskip": ("ours_erased", "ours_noskip"),
        "noskip_over_bias_model": ("ours_noskip", "ours_bias_model"),
        "sdpa_flash_over_ours_erased": ("sdpa_flash_nobias", "ours_erased"),
        "baseline_attention_over_ours_bias_model": ("baseline_attention_only", "ours_bias_model"),
        "baseline_build_over_ours_bias_model": ("baseline_build_and_attention", "ours_bias_model"),
    }
    out = {}
    for key, (numerator, denominator) in pairs.items():
        if (num := ms(numerator)) and (den := ms(denominator)):
            out[key] = round(num / den, 3)
    return out


def machine() -> dict[str, Any]:
    info = {
        "gpu": torch.cuda.get_device_name(),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = "name,power.limit,clocks.max.sm,memory.total,driver_version"
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    return info


def write(document: dict[str, Any]) -> Path:
    folder = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kernel_gpu.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int_list, default=LENGTHS)
    parser.add_argument("--head-dims", type=int_list, default=HEAD_DIMS)
    parser.add_argument("--budget-s", type=float, default=420.0, help="cells past this are skipped")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0
    started = time.monotonic()
    device = torch.device(DEVICE)
    document: dict[str, Any] = {
        "benchmark": "kernel_gpu",
        "command": "python -m bench.kernel_gpu" + "".join(f" {a}" for a in sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "parameters": {
            "batch": BATCH,
            "heads": HEADS,
            "dtype": str(DTYPE).removeprefix("torch."),
            "causal": True,
            "lengths": list(args.lengths),
            "head_dims": list(args.head_dims),
            "peak_tflops": PEAK_TFLOPS,
            "peak_note": "dense BF16 tensor peak of H100 SXM / H200 SXM (datasheet)",
            "flops": "2*2*B*H*L^2*D*0.5 for every variant",
            "timer": "median; L <= 2048: do_bench_cudagraph (no launch overhead, no L2 flush), "
            "else do_bench (events, L2 flushed); each cell records which",
        },
    }
    print(f"{document['machine']}\ncorrectness gate ...", flush=True)
    document["correctness_gate"] = gate = correctness_gate(device, args.head_dims)
    for case in gate["cases"]:
        print(f"  {'ok  ' if case['ok'] else 'FAIL'} {case['case']}", flush=True)
    if not gate["ok"]:
        print(f"correctness gate failed: no timing; wrote {write(document)}")
        return 1

    max_len = max(args.lengths)
    plans = {
        "model": zero_layer_plan(ModelConfig().bias_window, max_len, device)[0],
        "wide": zero_layer_plan(WIDE_WINDOW, max_len, device)[0],
    }
    document["parameters"]["skip_distance"] = {name: plan.skip_distance for name, plan in plans.items()}
    table = baseline_table(max_len, device)
    document["results"] = results = {}
    for head_dim in args.head_dims:
        for length in args.lengths:
            cells = {}
            for name, (setup, backend) in variants(length, head_dim, plans, table, device).items():
                if time.monotonic() - started > args.budget_s:
                    cells[name] = {"result": "skipped: time budget"}
                    continue
                cells[name] = cell = time_cell(setup, backend, length, head_dim)
                shown = (
                    f"{cell['median_ms']:9.3f} ms {cell['tflops']:6.1f} TF/s" if "median_ms" in cell else ""
                )
                print(f"d{head_dim} L{length:>6} {name:<32} {cell['result'][:40]:<8} {shown}", flush=True)
            results[f"d{head_dim}/L{length}"] = {"cells": cells, "ratios": ratios(cells)}
            write(document)
    document["wall_s"] = round(time.monotonic() - started, 1)
    print(f"wrote {write(document)} in {document['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
