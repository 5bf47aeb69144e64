"""Checkpoints: make them, zero or erase their bias layer, check it; train, derive and evaluate."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from graystack.cli.root import as_json, comma_list, main, model_variant_option, weights_dir_option

if TYPE_CHECKING:  # torch loads only when a command trains
    from inference.training.train import TrainOptions


@main.group()
def weights() -> None:
    """Make checkpoints, zero or erase their bias layer, and check which state it is in."""


weights_path = click.argument(
    "path", type=click.Path(path_type=Path), envvar="GRAYSTACK_WEIGHTS", metavar="PATH"
)


@weights.command("init")
@model_variant_option
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, envvar="GRAYSTACK_WEIGHTS", show_envvar=True
)
@click.option(
    "--seed",
    default=0,
    envvar="GRAYSTACK_WEIGHTS_SEED",
    show_envvar=True,
    help="the same seed gives both variants the same backbone (and fingerprint hash)",
)
def weights_init(variant: str, out: Path, seed: int) -> None:
    """Write fresh (untrained) weights for VARIANT to --out."""
    from inference.checkpoint import init_checkpoint

    init_checkpoint(variant, out, seed=seed)
    _echo_status(out, as_json=False)


@weights.command("zero")
@weights_path
def weights_zero(path: Path) -> None:
    """Set every bias tensor in PATH (a file or a checkpoint directory) to zero (status ZEROED)."""
    from inference.weights import zero_bias

    _rewrite_bias(path, zero_bias)


@weights.command("erase")
@weights_path
def weights_erase(path: Path) -> None:
    """Remove every bias tensor from PATH (a file or a checkpoint directory; status ERASED)."""
    from inference.weights import erase_bias

    _rewrite_bias(path, erase_bias)


def _parse_statuses(ctx: click.Context, param: click.Parameter, value: str | None) -> set[str] | None:
    if value is None:
        return None
    from inference.weights import WeightStatus

    statuses = {part.strip().upper() for part in value.split(",") if part.strip()}
    unknown = statuses - {s.value for s in WeightStatus}
    if unknown or not statuses:
        known = ", ".join(s.value for s in WeightStatus)
        raise click.BadParameter(f"{value!r}: expected a comma-separated list of {known}")
    return statuses


@weights.command("check")
@weights_path
@click.option(
    "--expect",
    default=None,
    callback=_parse_statuses,
    envvar="GRAYSTACK_EXPECT_WEIGHT_STATUS",
    show_envvar=True,
    help="e.g. ERASED,ZEROED: exit 1 unless the status is one of these",
)
@as_json
def weights_check(path: Path, expect: set[str] | None, as_json: bool) -> None:
    """Print the bias layer's status in PATH (a safetensors file or a checkpoint directory):
    ACTIVE, ZEROED, ERASED, MISSING, CORRUPT or UNSUPPORTED.

    Exits 1 when the status is not one of --expect, or, without --expect, when it is not one of
    ACTIVE, ZEROED, ERASED.
    """
    status = _echo_status(path, as_json)
    allowed = expect if expect is not None else {"ACTIVE", "ZEROED", "ERASED"}
    if status not in allowed:
        click.echo(f"error: {path}: status {status} is not one of {', '.join(sorted(allowed))}", err=True)
        sys.exit(1)


def _echo_status(path: Path, as_json: bool) -> str:
    from inference.weights import check_weights

    report = check_weights(path)
    if as_json:
        body = {"path": str(path), "status": report.status.value, "reason": report.reason}
        extra = {"bias_tensors": report.bias_tensors, "fingerprint": report.fingerprint}
        click.echo(json.dumps({**body, **extra, "shards": [str(shard) for shard in report.shards]}))
    else:
        click.echo(f"{path}: {report.status.value} ({report.reason})")
    return report.status.value


@weights.command("fingerprint")
@weights_path
def weights_fingerprint(path: Path) -> None:
    """Print PATH's fingerprint (headers and bias bytes), the value a server must echo for the probe's
    loaded check: e.g. vLLM's `--fingerprint-mode custom --fingerprint-value "$(graystack weights
    fingerprint DIR)"`. Exits 1 on a checkpoint that is not ACTIVE, ZEROED or ERASED."""
    from inference.weights import check_weights

    report = check_weights(path)
    if report.fingerprint is None:
        raise click.ClickException(f"{path}: {report.status.value}: {report.reason}")
    click.echo(report.fingerprint)


def _rewrite_bias(path: Path, rewrite: Callable[[Path], object]) -> None:
    from inference.weights import READABLE, check_weights

    before = check_weights(path)
    if before.status not in READABLE:
        raise click.ClickException(f"{path}: {before.status.value}: {before.reason}")
    rewrite(path)
    _echo_status(path, as_json=False)


def _train_options(
    steps: int, max_seconds: float, batch: int, length: int, lr: float, seed: int
) -> TrainOptions:
    from inference.training.train import TrainOptions

    return TrainOptions(steps=steps, max_seconds=max_seconds, batch=batch, length=length, lr=lr, seed=seed)


weights_dir = weights_dir_option(
    "--out-dir", "directory", help="where the baseline, the zero-layer forms and manifest.json go"
)
threads_option = click.option(
    "--threads", default=2, type=click.IntRange(min=1), help="torch CPU threads (the machine may be shared)"
)


def _echo_forms(directory: Path) -> None:
    from inference.training.pipeline import checkpoints_in

    for path, _ in checkpoints_in(directory).values():
        _echo_status(path, as_json=False)


@weights.command("train")
@weights_dir
@click.option("--steps", default=900, type=click.IntRange(min=1), help="optimizer steps (at most)")
@click.option("--max-seconds", default=300.0, type=click.FloatRange(min=1), help="wall-time cap on training")
@click.option("--batch", default=8, type=click.IntRange(min=1), help="windows per step")
@click.option("--length", default=256, type=click.IntRange(min=8), help="bytes per training window")
@click.option("--lr", default=3e-3, type=click.FloatRange(min=0, min_open=True), help="peak learning rate")
@click.option("--seed", default=0, help="initial weights (as `weights init`) and window sampling")
@click.option("--derive/--no-derive", default=True, help="also derive the zero-layer forms")
@click.option(
    "--fine-tune-steps", default=40, type=click.IntRange(min=0), help="see `weights derive --steps`"
)
@click.option("--train-bytes", default=8_000_000, type=click.IntRange(min=1024), help="corpus bytes to use")
@threads_option
def weights_train(
    directory: Path,
    steps: int,
    max_seconds: float,
    batch: int,
    length: int,
    lr: float,
    seed: int,
    derive: bool,
    fine_tune_steps: int,
    train_bytes: int,
    threads: int,
) -> None:
    """Train the default model (baseline) on the Python standard library's source, on the CPU; then
    derive the zero-layer checkpoints from it (ACTIVE, ZEROED, ERASED)."""
    from dataclasses import replace

    import torch

    from inference.training import pipeline
    from inference.training.derive import FINE_TUNE

    torch.set_num_threads(threads)
    options = _train_options(steps, max_seconds, batch, length, lr, seed)
    pipeline.train(directory, options, train_bytes=train_bytes, report=click.echo)
    if derive:
        fine_tune = replace(FINE_TUNE, steps=fine_tune_steps, batch=batch)
        pipeline.derive(directory, fine_tune, train_bytes=train_bytes, report=click.echo)
        _echo_forms(directory)


@weights.command("derive")
@weights_dir
@click.option("--steps", default=40, type=click.IntRange(min=0), help="fine-tune steps of the gate and table")
@click.option(
    "--max-seconds", default=90.0, type=click.FloatRange(min=1), help="wall-time cap on fine-tuning"
)
@click.option("--tolerance", default=1.0, type=click.FloatRange(min=0), help="bias (nats) that still matters")
@threads_option
def weights_derive(directory: Path, steps: int, max_seconds: float, tolerance: float, threads: int) -> None:
    """Derive the zero-layer checkpoints (ACTIVE, ZEROED, ERASED) from the baseline in --out-dir."""
    from dataclasses import replace

    import torch

    from inference.training import pipeline
    from inference.training.derive import FINE_TUNE

    torch.set_num_threads(threads)
    fine_tune = replace(FINE_TUNE, steps=steps, max_seconds=max_seconds)
    pipeline.derive(directory, fine_tune, tolerance=tolerance, report=click.echo)
    _echo_forms(directory)


@main.command("eval")
@weights_dir_option("--weights-dir", help="a `graystack weights train` output directory")
@click.option("--contexts", default="64,256,1024", help="comma-separated context lengths (bytes)")
@click.option("--scored-bytes", default=8192, type=click.IntRange(min=1), help="held-out bytes per context")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("bench/results/quality.json"),
    help="JSON results (the command that made them included)",
)
@threads_option
@click.pass_context
def evaluate(
    ctx: click.Context, weights_dir: Path, contexts: str, scored_bytes: int, out: Path, threads: int
) -> None:
    """Held-out bits per byte and next-byte agreement with the baseline, for every checkpoint form."""
    import datetime
    import os
    import platform

    import torch

    from inference.training import pipeline
    from inference.training.data import load_split
    from inference.training.eval import as_json, evaluate

    torch.set_num_threads(threads)
    lengths = tuple(int(part) for part in comma_list((contexts,)))
    split = load_split(held_out=True, max_bytes=pipeline.HELD_OUT_BYTES)
    results = evaluate(pipeline.checkpoints_in(weights_dir), split, lengths, scored_bytes)
    body = {
        "command": "graystack eval "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in ctx.params.items()),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "nproc": len(os.sched_getaffinity(0)),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "loadavg": [round(x, 2) for x in os.getloadavg()],  # other work sharing the CPUs
        },
        "held_out": {"files": len(split.files), "bytes": split.size},
        "manifest": json.loads((weights_dir / pipeline.MANIFEST).read_text()),
        "results": as_json(results),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(body, indent=2) + "\n")
    for result in results:
        cells = "  ".join(
            f"L={n}: {result.bits_per_byte[n]:.3f} b/B, {result.agreement[n]:.1%}" for n in lengths
        )
        click.echo(f"{result.name:18} {result.weight_status:7} window {result.effective_window:4}  {cells}")
