"""Derive the zero-layer checkpoints from a trained baseline.

The zero-layer's bias is gate(d) x table[W + d], zero past W. The baseline's learned bias b[h, d] is
folded into it in three steps:
1. subtract a per-head constant (its mean past W): softmax ignores a constant added to every key, so
   this changes nothing, and it brings the far bias, which the zero-layer cannot represent, near zero;
2. the reach R: the first distance from which every head's remaining bias stays within `tolerance`;
   the gate is set to a step, about 1 below R and under the skip threshold from R on, and the table
   holds the remaining bias below R, divided by the gate, and zero elsewhere (sparse: it is non-zero only
   where the bias matters);
3. a brief fine-tune of the gate and table alone (the backbone stays the baseline's, bit for bit, so
   both variants show one fingerprint hash), then the table is cleared from the skip distance on, so the
   served bias is exactly the trained one.
ZEROED and ERASED are that checkpoint passed through `zero_bias` / `erase_bias`: no bias work at all,
and no compensation for the bias they lost (the eval table shows what that costs).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import torch

from inference.bias import BaselineBias, ZeroLayerBias
from inference.checkpoint import save_model
from inference.model import Block, TinyDecoder
from inference.training.data import Split
from inference.training.train import TrainOptions, TrainResult, fit
from inference.weights import erase_bias, zero_bias

GATE_SHARPNESS = 40.0  # hidden unit slope over log-distance: the gate falls within ~1% of R
GATE_DEPTH = 8.0  # sigmoid(+-8): 0.9997 near, 0.0003 far
FINE_TUNE = TrainOptions(steps=40, max_seconds=90.0, lr=3e-3, seed=1)
# Bias (nats, after the per-head constant) that still matters. BENCHMARKS.md's sweep: on the trained
# default model 1.0 keeps the zero-layer within 0.001 bits/byte of the baseline up to 256 bytes with a
# window of 64, not 129 (0.05); 2.0 (a window of 22) costs a little more.
TOLERANCE = 1.0

ACTIVE, ZEROED, ERASED = "zero-layer", "zero-layer-zeroed", "zero-layer-erased"


@dataclass(frozen=True)
class Derived:
    reach: int  # the step the fold put the gate at
    effective_window: int  # the served skip distance: the widest over the layers
    fine_tune: TrainResult


Bias = TypeVar("Bias", BaselineBias, ZeroLayerBias)


def bias_layer(block: Block, kind: type[Bias]) -> Bias:
    """The block's bias layer as the variant the fold reads or writes; another variant is a caller's bug."""
    layer = block.attn.position_adaptive_bias
    if not isinstance(layer, kind):
        raise TypeError(f"expected a {kind.__name__} layer, got {type(layer).__name__}")
    return layer


@torch.no_grad()
def set_step_gate(zero: ZeroLayerBias, reach: int) -> None:
    """One hidden unit makes the gate a step at distance `reach`; the others are switched off."""
    first, second = zero.gate_layers()
    first.weight.zero_()
    first.bias.zero_()
    second.weight.zero_()
    first.weight[0, 0] = GATE_SHARPNESS
    first.bias[0] = -GATE_SHARPNESS * torch.log1p(torch.tensor(reach - 0.5))
    second.weight[0, 0] = -GATE_DEPTH
    second.bias.zero_()


@torch.no_grad()
def fold_bias(baseline: BaselineBias, zero: ZeroLayerBias, trained_length: int, tolerance: float) -> int:
    """Fit `zero`'s gate and table to `baseline`'s bias over the distances training saw; the reach."""
    window = zero.window
    table = baseline.table.detach()[:, :trained_length].double()
    far = table[:, window + 1 :] if trained_length > window + 1 else table[:, -1:]
    residual = table - far.mean(dim=1, keepdim=True)
    above = torch.nonzero((residual.abs() > tolerance).any(dim=0))
    reach = min(int(above[-1]) + 1 if above.numel() else 1, window + 1, trained_length)
    set_step_gate(zero, reach)
    gate = zero.gate_values(reach)
    zero.table.zero_()
    zero.table[:, window : window + reach] = (residual[:, :reach] / gate).to(zero.table.dtype)
    return reach


@torch.no_grad()
def clear_past_skip(model: TinyDecoder) -> None:
    """Zero each table outside [0, skip distance): bias the plan would not apply reliably, or never."""
    model.refresh_plans()
    for block in model.layers:
        zero = bias_layer(block, ZeroLayerBias)
        keep = torch.zeros_like(zero.table, dtype=torch.bool)
        keep[:, zero.window : zero.window + block.attn.plan.skip_distance] = True
        zero.table.masked_fill_(~keep, 0.0)
    model.refresh_plans()


def derive_zero_layer(
    baseline: TinyDecoder,
    split: Split,
    trained_length: int,
    tolerance: float = TOLERANCE,
    fine_tune: TrainOptions = FINE_TUNE,
    report: Callable[[int, float], None] | None = None,
) -> tuple[TinyDecoder, Derived]:
    """The ACTIVE zero-layer model: the baseline's backbone with its bias folded and fine-tuned."""
    model = TinyDecoder(baseline.config, "zero-layer")
    state = {k: v for k, v in baseline.state_dict().items() if "position_adaptive_bias" not in k}
    model.load_state_dict(state, strict=False)
    reaches = [
        fold_bias(
            bias_layer(theirs, BaselineBias), bias_layer(ours, ZeroLayerBias), trained_length, tolerance
        )
        for theirs, ours in zip(baseline.layers, model.layers, strict=True)
    ]
    bias = [p for name, p in model.named_parameters() if "position_adaptive_bias" in name]
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("position_adaptive_bias" in name)
    result = fit(model, bias, split, replace(fine_tune, length=min(fine_tune.length, trained_length)), report)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    clear_past_skip(model)
    return model, Derived(max(reaches), model.skip_distance, result)


def write_forms(model: TinyDecoder, directory: Path) -> dict[str, Path]:
    """The ACTIVE checkpoint, and its ZEROED and ERASED copies, under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / f"{name}.safetensors" for name in (ACTIVE, ZEROED, ERASED)}
    save_model(model, paths[ACTIVE])
    for name, rewrite in ((ZEROED, zero_bias), (ERASED, erase_bias)):
        shutil.copyfile(paths[ACTIVE], paths[name])
        rewrite(paths[name])
    return paths
