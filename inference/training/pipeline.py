"""The weights pipeline behind `graystack weights train|derive` and `graystack eval`: one directory
holds the trained baseline, the three zero-layer forms, and a manifest saying how they were made."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inference.checkpoint import load_model, save_model
from inference.config import ModelConfig
from inference.training.data import load_split
from inference.training.derive import (
    ACTIVE,
    ERASED,
    FINE_TUNE,
    TOLERANCE,
    ZEROED,
    derive_zero_layer,
    write_forms,
)
from inference.training.train import TrainOptions, train_baseline

DEFAULT_DIR = Path("runs/weights")  # ignored by git: built here, never downloaded
BASELINE = "baseline"
MANIFEST = "manifest.json"
TRAIN_BYTES = 8_000_000
HELD_OUT_BYTES = 2_000_000
VARIANT_OF = {BASELINE: "baseline", ACTIVE: "zero-layer", ZEROED: "zero-layer", ERASED: "zero-layer"}

Report = Callable[[str], None]


def checkpoints_in(directory: Path) -> dict[str, tuple[Path, str]]:
    """Each form's checkpoint path and the variant it is served as."""
    return {name: (directory / f"{name}.safetensors", variant) for name, variant in VARIANT_OF.items()}


def _manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def train(
    directory: Path,
    options: TrainOptions,
    config: ModelConfig | None = None,
    train_bytes: int = TRAIN_BYTES,
    report: Report = print,
) -> Path:
    """Train the baseline on the stdlib's training files; its checkpoint path."""
    split = load_split(held_out=False, max_bytes=train_bytes)
    report(f"training on {len(split.files)} stdlib files ({split.size} bytes)")
    model, result = train_baseline(
        config or ModelConfig(),
        split,
        options,
        lambda step, bits: report(f"step {step}: {bits:.3f} bits/byte"),
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{BASELINE}.safetensors"
    save_model(model, path)
    manifest = {
        "python": platform.python_version(),
        "corpus": {"train_files": len(split.files), "train_bytes": split.size},
        "train": {"options": asdict(options), "result": asdict(result)},
    }
    _write_manifest(directory, manifest)
    report(
        f"baseline: {result.steps} steps in {result.seconds:.0f} s, {result.final_loss_bits:.3f} bits/byte"
    )
    return path


def derive(
    directory: Path,
    fine_tune: TrainOptions = FINE_TUNE,
    train_bytes: int = TRAIN_BYTES,
    tolerance: float = TOLERANCE,
    report: Report = print,
) -> dict[str, Path]:
    """The zero-layer forms from the baseline in `directory`; their paths."""
    baseline = load_model(directory / f"{BASELINE}.safetensors", "baseline").model
    manifest = _manifest(directory)
    trained_length = manifest.get("train", {}).get("options", {}).get("length", fine_tune.length)
    split = load_split(held_out=False, max_bytes=train_bytes)
    model, derived = derive_zero_layer(
        baseline,
        split,
        trained_length,
        tolerance,
        fine_tune,
        lambda step, bits: report(f"fine-tune step {step}: {bits:.3f} bits/byte"),
    )
    paths = write_forms(model, directory)
    manifest["derive"] = {"tolerance": tolerance, "fine_tune_options": asdict(fine_tune), **asdict(derived)}
    _write_manifest(directory, manifest)
    report(f"zero-layer: gate step at {derived.reach}, effective window {derived.effective_window}")
    return paths
