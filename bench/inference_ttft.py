"""CPU: time to first token and peak memory, zero-layer vs baseline, prompts of 512, 2K and 8K bytes.

Each (variant, prompt) case runs in a fresh process, so its peak resident memory is its own: the
process loads the model, resets the kernel's high-water mark (/proc/self/clear_refs), then prefills
the prompt and samples the first token, `--repeats` times. TTFT here is the model's share of it
(prefill + first token), without HTTP. Both variants share one backbone (same seed); only the bias
layer differs: the baseline materializes [H, L, L], the zero-layer adds bias only near the diagonal.

Two anchors run the zero-layer's own blocked CPU path, so what the skip itself buys is measured
against a good full-bias implementation, not only against the materialized baseline:
`blocked-full-bias` computes the bias on every tile (no skip: what a fused full-bias kernel does),
`blocked-no-bias` adds none at all (the floor any bias scheme sits above).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bench._common import rss_kib, summarize, write_result

if TYPE_CHECKING:
    from inference.model import Block, TinyDecoder

PROMPT_BYTES = (512, 2048, 8192)
VARIANTS = ("baseline", "zero-layer")
ANCHORS = ("blocked-full-bias", "blocked-no-bias")  # the zero-layer's checkpoint, its plan replaced


def anchored(model: TinyDecoder, case: str) -> None:
    """Give every layer of a zero-layer model the anchor's bias plan (bias on every tile, or none)."""
    from inference.bias import BiasPlan

    for block in model.blocks:
        attention = cast("Block", block).attn
        if case == "blocked-full-bias":
            attention.plan = BiasPlan(attention.plan.vector, skip_distance=model.config.max_seq_len)
        else:
            attention.plan = BiasPlan.none()


def measure(case: str, weights: Path, prompt_bytes: int, repeats: int) -> dict[str, Any]:
    """In this process: TTFT samples and the peak memory above the loaded model, in MiB."""
    import torch

    from inference.checkpoint import load_model
    from inference.model import KVCache

    torch.set_num_threads(2)
    loaded = load_model(weights, "zero-layer" if case in ANCHORS else case)
    if case in ANCHORS:
        anchored(loaded.model, case)
    prompt = torch.randint(0, 256, (prompt_bytes,), generator=torch.Generator().manual_seed(0))
    Path("/proc/self/clear_refs").write_text("5")  # peak (VmHWM) := current RSS
    before = rss_kib()["VmRSS"]
    samples, computed, skipped = [], 0, 0
    for _ in range(repeats):
        started = time.perf_counter()
        logits, blocks = loaded.model.prefill(prompt, KVCache())
        int(torch.argmax(logits))
        samples.append(time.perf_counter() - started)
        computed, skipped = blocks.computed, blocks.skipped
    return {
        "ttft_ms": summarize(samples, 1000),
        "peak_mib_above_model": round((rss_kib()["VmHWM"] - before) / 1024, 1),
        "bias_blocks": {"computed": computed, "skipped": skipped},
        "effective_window": loaded.model.skip_distance,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", nargs=3, metavar=("VARIANT", "WEIGHTS", "BYTES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:  # the child process
        variant, weights, prompt_bytes = args.case
        print(json.dumps(measure(variant, Path(weights), int(prompt_bytes), args.repeats)))
        return

    from inference.checkpoint import init_checkpoint

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ttft-") as workdir:
        weights = {v: init_checkpoint(v, Path(workdir) / f"{v}.safetensors", seed=0) for v in VARIANTS}
        for prompt_bytes in PROMPT_BYTES:
            row = {}
            for case in (*VARIANTS, *ANCHORS):
                child = [sys.executable, "-m", "bench.inference_ttft", "--repeats", str(args.repeats)]
                checkpoint = weights["zero-layer" if case in ANCHORS else case]
                out = subprocess.run(
                    [*child, "--case", case, str(checkpoint), str(prompt_bytes)],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=900,
                ).stdout
                row[case] = json.loads(out.strip().splitlines()[-1])
            base, zero = row["baseline"], row["zero-layer"]
            full, floor = (row[case]["ttft_ms"]["p50"] for case in ANCHORS)
            row["zero_layer_against_anchors"] = {
                "full_bias_over_zero_layer": round(full / zero["ttft_ms"]["p50"], 2),
                "zero_layer_over_no_bias": round(zero["ttft_ms"]["p50"] / floor, 2),
            }
            row["baseline_over_zero_layer"] = {
                "ttft_p50": round(base["ttft_ms"]["p50"] / zero["ttft_ms"]["p50"], 2),
                "peak_memory": round(
                    base["peak_mib_above_model"] / max(zero["peak_mib_above_model"], 0.1), 1
                ),
            }
            results[str(prompt_bytes)] = row
            print(
                f"{prompt_bytes:5d} bytes  TTFT p50 baseline {base['ttft_ms']['p50']:8.1f} ms  "
                f"zero-layer {zero['ttft_ms']['p50']:7.1f} ms  (x{row['baseline_over_zero_layer']['ttft_p50']})   "
                f"peak MiB baseline {base['peak_mib_above_model']:7.1f}  zero-layer {zero['peak_mib_above_model']:6.1f}"
                f"   anchors: full bias {full:8.1f} ms, no bias {floor:7.1f} ms"
            )
    from inference.config import ModelConfig

    path = write_result(
        "inference_ttft",
        {
            "prompt_bytes": list(PROMPT_BYTES),
            "anchors": "the zero-layer's blocked CPU path with bias on every tile, and with none",
            "repeats": args.repeats,
            "model": ModelConfig().__dict__,
            "threads": 2,
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
