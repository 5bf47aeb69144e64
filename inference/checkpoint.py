"""Model checkpoints: make, load (safetensors only, never a pickle), and fingerprint them."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from inference.config import ModelConfig
from inference.model import TinyDecoder
from inference.weights import BIAS_MARKER, READABLE, StatusReport, WeightStatus, check_weights

MODEL_NAME = "graystack-tiny"
VARIANTS = ("baseline", "zero-layer")


class CheckpointError(ValueError):
    """A checkpoint that cannot be served; the message says why."""


@dataclass(frozen=True)
class LoadedModel:
    model: TinyDecoder
    status: StatusReport
    fingerprint: str


def fingerprint(state: dict[str, torch.Tensor], variant: str) -> str:
    """`<model>-<hash of the backbone>`, plus `-zero-layer-v1` on the zero-layer variant.

    The hash leaves out the bias layer, so both variants of one model show the same hash.
    """
    digest = hashlib.sha256()
    for name in sorted(state):
        if BIAS_MARKER not in name:
            digest.update(name.encode())
            digest.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
    suffix = "-zero-layer-v1" if variant == "zero-layer" else ""
    return f"{MODEL_NAME}-{digest.hexdigest()[:12]}{suffix}"


def save_model(model: TinyDecoder, path: Path) -> None:
    metadata = {**model.config.to_metadata(), "variant": model.variant, "model": MODEL_NAME}
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def init_checkpoint(variant: str, out: Path, config: ModelConfig | None = None, seed: int = 0) -> Path:
    """Fresh (untrained) weights for `variant`, written to `out`."""
    if variant not in VARIANTS:
        raise CheckpointError(f"unknown variant {variant!r}: expected one of {VARIANTS}")
    model = TinyDecoder(config or ModelConfig(), variant)
    model.init_weights(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, out)
    return out


def load_model(path: Path, variant: str) -> LoadedModel:
    """The model to serve as `variant`, from a safetensors file or a sharded checkpoint directory; an
    ERASED checkpoint serves with no bias work at all."""
    status = check_weights(path)
    if status.status not in READABLE:
        raise CheckpointError(f"cannot serve {path}: {status.status}: {status.reason}")
    metadata = status.metadata or {}
    saved_variant = metadata.get("variant")
    if status.status != WeightStatus.ERASED and saved_variant not in (None, variant):
        raise CheckpointError(f"{path} holds {saved_variant!r} bias weights, not {variant!r}")
    model = TinyDecoder(ModelConfig.from_metadata(metadata), variant)
    state = {name: tensor for shard in status.shards for name, tensor in load_file(str(shard)).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise CheckpointError(f"{path}: tensors this model does not have: {sorted(unexpected)[:5]}")
    if any(BIAS_MARKER not in name for name in missing):
        raise CheckpointError(
            f"{path}: missing tensors {sorted(n for n in missing if BIAS_MARKER not in n)[:5]}"
        )
    if missing:  # erased: nothing to add, and the plan says so
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if BIAS_MARKER in name:
                    parameter.zero_()
    model.eval()
    model.refresh_plans()
    return LoadedModel(model, status, fingerprint(state, variant))
