"""The probe's weight check on sharded checkpoints: seconds and bytes read, against the checkpoint's size.

Checkpoints are made here (inference.weights.save_sharded): the same bias layer, 8 layers of
`position_adaptive_bias.table` float32 [16, 4097] (2 MB in all), beside a backbone of float32 tensors of
64 MB each, in shards of at most 512 MB, for backbones of --sizes MB. For each checkpoint:
  check cold   `check_weights(dir)` after every file's pages are dropped from the page cache
               (posix_fadvise DONTNEED on clean, synced files), --repeats times
  check warm   the same with the pages cached (the probe's steady state: every interval, same files)
  bytes        from /proc/self/io around one cold check: `rchar` (bytes through read calls) and
               `read_bytes` (bytes fetched from storage, memory-mapped reads included)
  read all     every byte of the checkpoint read once, cold: what any check that reads the tensors
               (or a server's load) costs, side by side in the same run
Writes bench/results/weight_check.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import brief, summarize, write_result
from inference.weights import BIAS_MARKER, WeightStatus, check_weights, save_sharded

MB = 1024 * 1024
TENSOR_BYTES = 64 * MB
SHARD_BYTES = 512 * MB
LAYERS, HEADS, WIDTH = 8, 16, 4097


def make_checkpoint(directory: Path, backbone_mb: int) -> int:
    """A sharded checkpoint with a `backbone_mb` backbone and the bias layer; its size in bytes."""
    rng = np.random.default_rng(0)
    arrays = {
        f"model.layers.{i}.self_attn.{BIAS_MARKER}.table": rng.standard_normal(
            (HEADS, WIDTH), dtype=np.float32
        )
        for i in range(LAYERS)
    }
    for i in range(backbone_mb * MB // TENSOR_BYTES):
        arrays[f"model.backbone.{i:04d}.weight"] = np.full(TENSOR_BYTES // 4, 0.5, dtype=np.float32)
    save_sharded(arrays, directory, SHARD_BYTES)
    os.sync()
    return sum(path.stat().st_size for path in directory.iterdir())


def drop_cache(directory: Path) -> None:
    for path in directory.iterdir():
        with path.open("rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def io_counters() -> dict[str, int]:
    pairs = (line.split(":") for line in Path("/proc/self/io").read_text().splitlines())
    return {key: int(value) for key, value in pairs}


def timed_check(directory: Path) -> float:
    started = time.perf_counter()
    report = check_weights(directory)
    elapsed = time.perf_counter() - started
    if report.status != WeightStatus.ACTIVE:
        raise SystemExit(f"{directory}: {report.status}: {report.reason}")
    return elapsed


def read_all(directory: Path) -> float:
    started = time.perf_counter()
    for path in directory.iterdir():
        with path.open("rb", buffering=0) as handle:
            while handle.read(16 * MB):
                pass
    return time.perf_counter() - started


def measure(directory: Path, size: int, repeats: int) -> dict[str, Any]:
    cold, warm = [], []
    for _ in range(repeats):
        drop_cache(directory)
        cold.append(timed_check(directory))
        warm.append(timed_check(directory))
    drop_cache(directory)
    before = io_counters()
    timed_check(directory)
    after = io_counters()
    drop_cache(directory)
    whole = read_all(directory)
    return {
        "checkpoint_bytes": size,
        "shards": len(check_weights(directory).shards),
        "check_cold_ms": summarize(cold, 1000),
        "check_warm_ms": summarize(warm, 1000),
        "rchar_bytes": after["rchar"] - before["rchar"],
        "read_bytes": after["read_bytes"] - before["read_bytes"],
        "read_all_cold_s": round(whole, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512,2048", help="backbone sizes, MB, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write the checkpoints (default: a temp dir)"
    )
    args = parser.parse_args()
    sizes = [int(part) for part in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="weight-check-", dir=args.dir) as scratch:
        for backbone_mb in sizes:
            directory = Path(scratch) / f"backbone-{backbone_mb}mb"
            size = make_checkpoint(directory, backbone_mb)
            result = measure(directory, size, args.repeats)
            results[f"{backbone_mb}MB"] = result
            print(
                f"{size / MB:8.0f} MB in {result['shards']} shards: check cold {brief(result['check_cold_ms'])}; "
                f"warm p50 {result['check_warm_ms']['p50']:.2f} ms; read {result['rchar_bytes'] / 1024:.0f} KiB "
                f"(storage {result['read_bytes'] / 1024:.0f} KiB); reading it all {result['read_all_cold_s']:.2f} s"
            )
            for path in directory.iterdir():
                path.unlink()
    parameters = {
        "bias": f"{LAYERS} x float32 [{HEADS}, {WIDTH}]",
        "backbone_tensor_bytes": TENSOR_BYTES,
        "max_shard_bytes": SHARD_BYTES,
        "repeats": args.repeats,
    }
    print(write_result("weight_check", parameters, results))


if __name__ == "__main__":
    main()
