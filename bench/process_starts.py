"""Child processes started beside a gRPC server: how many die before they run, and what a start costs.

A stack's processes are started from processes that may hold a gRPC server or channel (the in-process
gateway of the Kubernetes-mode tests, anything beside an xDS server). Popen with a `preexec_fn` forks
(not vfork), so the child runs gRPC's fork handlers, which restart its event engine's poller there;
Popen then closes the child's descriptors before exec and the poller aborts the child. CI lost an
Envoy that way. Side by side in one run, interleaved, each start a `true` that must exit 0:

- `preexec_fn`: what `start_process` did before, PR_SET_PDEATHSIG armed in a preexec_fn;
- `start_process`: what it does now (graystack/local/processes.py: a shim that arms it, then execs);
- `plain`: Popen with neither, the floor (no death signal at all).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from bench._common import write_result
from graystack.local.processes import start_process

PR_SET_PDEATHSIG = 1


def preexec_start(log_dir: Path, i: int) -> subprocess.Popen[bytes]:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    with (log_dir / f"preexec-{i}.log").open("ab") as log:
        return subprocess.Popen(["true"], stdout=log, stderr=subprocess.STDOUT, preexec_fn=arm)


def plain_start(log_dir: Path, i: int) -> subprocess.Popen[bytes]:
    with (log_dir / f"plain-{i}.log").open("ab") as log:
        return subprocess.Popen(["true"], stdout=log, stderr=subprocess.STDOUT)


def shim_start(log_dir: Path, i: int) -> subprocess.Popen[bytes]:
    return start_process(f"shim-{i}", ["true"], log_dir).popen


METHODS = {"preexec_fn": preexec_start, "start_process": shim_start, "plain": plain_start}


async def measure(starts: int, log_dir: Path) -> dict[str, dict[str, Any]]:
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    results = {name: {"starts": 0, "aborted": 0, "seconds": 0.0} for name in METHODS}
    try:
        for i in range(starts):
            for name, start in METHODS.items():
                began = time.perf_counter()
                child = start(log_dir, i)
                code = await asyncio.to_thread(child.wait, 30)
                results[name]["seconds"] += time.perf_counter() - began
                results[name]["starts"] += 1
                results[name]["aborted"] += int(code != 0)
    finally:
        await server.stop(None)
    return {
        name: {
            "starts": r["starts"],
            "aborted": r["aborted"],
            "aborted_share": r["aborted"] / r["starts"],
            "ms_per_start_and_exit": round(1000 * r["seconds"] / r["starts"], 2),
        }
        for name, r in results.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=1500, help="starts per method")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = asyncio.run(measure(args.starts, Path(folder)))
    for name, r in results.items():
        print(
            f"{name:14s} aborted {r['aborted']:4d} of {r['starts']}  {r['ms_per_start_and_exit']} ms a start"
        )
    path = write_result(
        "process_starts",
        {"starts_per_method": args.starts, "child": "true", "beside": "a running grpc.aio server"},
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
