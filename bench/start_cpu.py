"""What a start of graystack's processes costs in CPU (issue 35: a quarter of the suite's CPU went to
starting `graystack serve`, 8 % to probes). Side by side, alternating, in fresh interpreters: each as
shipped, and with ml_dtypes imported first, as both did before that import became lazy
(inference/weights/dtypes.py). The gateway never imported it.

    python -m bench.start_cpu --weights DIR    # DIR holds baseline.safetensors (`make weights`)

Writes bench/results/start_cpu.json: CPU seconds (user + system) per start, the median of the runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench._common import write_result
from graystack.local.processes import free_port

EAGER = "import ml_dtypes; "  # what every process paid before


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def imports(modules: str, eager: bool) -> float:
    """CPU seconds of a fresh interpreter importing `modules`."""
    before = children_cpu()
    subprocess.run([sys.executable, "-c", (EAGER if eager else "") + f"import {modules}"], check=True)
    return children_cpu() - before


def serve_to_ready(weights: Path, eager: bool) -> float:
    """CPU seconds of `graystack serve` from its start to /readyz 200 (read from /proc, then stopped)."""
    port = free_port()
    code = (EAGER if eager else "") + "import runpy; runpy.run_module('graystack', run_name='__main__')"
    argv = [sys.executable, "-c", code, "serve", "--variant", "baseline"]
    argv += ["--weights", str(weights / "baseline.safetensors"), "--port", str(port)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    fields = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()
                    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError("graystack serve was not ready in 120 s")
    finally:
        process.terminate()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, required=True, help="a directory with baseline.safetensors")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    measures: dict[str, Callable[[bool], float]] = {
        "probe imports (probes.app, probes.runner)": lambda eager: imports(
            "probes.app, probes.runner", eager
        ),
        "graystack serve, start to ready": lambda eager: serve_to_ready(args.weights, eager),
    }
    rows = []
    for name, measure in measures.items():
        runs: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.runs):
            for eager in (True, False):  # alternating, so the box's load falls on both alike
                runs[eager].append(measure(eager))
        before, after = statistics.median(runs[True]), statistics.median(runs[False])
        rows.append({"process": name, "cpu_s_eager": round(before, 3), "cpu_s_lazy": round(after, 3)})
        print(f"{name}: {before:.2f} s -> {after:.2f} s of CPU (median of {args.runs})")
    write_result("start_cpu", {"runs": args.runs}, {"rows": rows})


if __name__ == "__main__":
    main()
