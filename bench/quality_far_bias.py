"""Where the derived zero-layer's 1K-context gap comes from: the baseline's bias past what it can express.

The baseline was trained on 256-byte windows, so its bias table past distance 256 still holds its
initial decay (inference/bias.py: ALiBi-like, never trained); the derived zero-layer's bias is zero
past its effective window (64), so it cannot down-weight far keys at all. If that is the gap, the
baseline with its bias held constant past the trained length (the untrained decay removed; nothing it
learned changed) should lose at 1K what the zero-layer loses, and nothing at 256. Same held-out
windows and scoring as `graystack eval`.

    python -m bench.quality_far_bias [--weights-dir runs/weights] [--scored-bytes 8192]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import cast

import torch

from bench._common import write_result
from inference.checkpoint import load_model, save_model
from inference.model import Block
from inference.training import pipeline
from inference.training.data import load_split
from inference.training.eval import as_json, evaluate

CONTEXTS = (256, 1024)


def flattened_past(baseline: Path, distance: int, out: Path) -> Path:
    """The baseline with each head's bias held at its value at `distance - 1` from `distance` on."""
    model = load_model(baseline, "baseline").model
    with torch.no_grad():
        for block in model.blocks:
            table = cast(Block, block).attn.position_adaptive_bias.table
            table[:, distance:] = table[:, distance - 1 : distance]
    save_model(model, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights-dir", type=Path, default=pipeline.DEFAULT_DIR)
    parser.add_argument("--scored-bytes", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    manifest = json.loads((args.weights_dir / pipeline.MANIFEST).read_text())
    trained = manifest["train"]["options"]["length"]
    baseline = args.weights_dir / "baseline.safetensors"
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = {
            "baseline": (baseline, "baseline"),
            "zero-layer": (args.weights_dir / "zero-layer.safetensors", "zero-layer"),
            f"baseline, bias flat past {trained}": (
                flattened_past(baseline, trained, Path(scratch) / "flat.safetensors"),
                "baseline",
            ),
        }
        split = load_split(held_out=True, max_bytes=pipeline.HELD_OUT_BYTES)
        results = evaluate(checkpoints, split, CONTEXTS, args.scored_bytes)
    for result in results:
        cells = "  ".join(
            f"L={n}: {result.bits_per_byte[n]:.3f} b/B, {result.agreement[n]:.1%}" for n in CONTEXTS
        )
        print(f"{result.name:32} {cells}")
    parameters = {"contexts": CONTEXTS, "scored_bytes": args.scored_bytes, "trained_length": trained}
    write_result("quality_far_bias", parameters, {"forms": as_json(results)})


if __name__ == "__main__":
    main()
