"""Train the baseline on the stdlib corpus, on the CPU, within a step count and a wall-time cap."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from inference.config import ModelConfig
from inference.model import TinyDecoder
from inference.training.data import Split, random_windows
from inference.training.forward import next_byte_loss


@dataclass(frozen=True)
class TrainOptions:
    steps: int = 900
    max_seconds: float = 300.0  # a cap: the run stops at whichever comes first
    batch: int = 8
    length: int = 256  # bytes of context per training window
    lr: float = 3e-3
    seed: int = 0


@dataclass(frozen=True)
class TrainResult:
    steps: int
    seconds: float
    final_loss_bits: float | None  # mean over the last tenth of the steps, in bits per byte; None: no steps


def learning_rate(step: int, elapsed: float, options: TrainOptions) -> float:
    """Linear warm-up over the first 5% of the steps, then cosine decay to a tenth, by whichever of
    steps or wall time is further along: a run the time cap cuts short still ends on a low rate."""
    warmup = max(1, options.steps // 20)
    if step < warmup:
        return options.lr * (step + 1) / warmup
    progress = max(step / options.steps, elapsed / options.max_seconds)
    return options.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0))))


def fit(
    model: TinyDecoder,
    parameters: Iterable[torch.nn.Parameter],
    split: Split,
    options: TrainOptions,
    report: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Minimise next-byte loss on random windows of `split`, updating only `parameters`."""
    chosen = list(parameters)
    optimizer = torch.optim.AdamW(chosen, lr=options.lr, weight_decay=0.01, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(options.seed)
    model.train()
    started = time.monotonic()
    losses: list[float] = []
    step = 0
    while step < options.steps and time.monotonic() - started < options.max_seconds:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, time.monotonic() - started, options)
        loss = next_byte_loss(model, random_windows(split, options.batch, options.length, generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(chosen, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()) / math.log(2))
        step += 1
        if report is not None and (step % 25 == 0 or step == options.steps):
            report(step, losses[-1])
    model.eval()
    model.refresh_plans()
    tail = losses[-max(1, len(losses) // 10) :]
    return TrainResult(step, time.monotonic() - started, sum(tail) / len(tail) if tail else None)


def train_baseline(
    config: ModelConfig,
    split: Split,
    options: TrainOptions,
    report: Callable[[int, float], None] | None = None,
) -> tuple[TinyDecoder, TrainResult]:
    """A baseline model, initialised as `weights init` does (same seed), then trained end to end."""
    model = TinyDecoder(config, "baseline")
    model.init_weights(options.seed)
    result = fit(model, model.parameters(), split, options, report)
    return model, result
