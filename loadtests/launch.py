"""`make soak`: run Locust headless into a run folder, against a given host or a local stack it starts
(real model servers for both variants, probes, the gateway and Envoy, all on loopback), optionally
flipping the weights every few seconds, and exit with Locust's verdict.

    python -m loadtests.launch --run-dir runs/soak-1 [--host URL --admin-url URL] [--flip-every 5]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

from graystack.local.processes import ManagedProcess, start_process

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
# The local stack's rollback guard, loosened: CPU model servers sharing a small machine with Locust are
# slow and uneven, and a guard that rolls back on that noise would refuse every flip of the run.
LOCAL_ANALYSIS = {
    "analysis": {
        "interval": "2s",
        "window": "30s",
        "max_error_rate": 0.05,
        "min_detectable_error_rate": 0.15,
        "max_latency_ratio": 100,
        "max_ttft_p95": "60s",
        "provider": {"type": "direct"},
    },
    "timeouts": {"request": "60s", "first_byte": "10s"},
}
# What CPU model servers on a small machine can stream to 20 users (tests/integration/test_soak.py says
# how it was measured): short prompts, few tokens. A variable already set wins.
LOCAL_MIX = {"LOADTEST_PROMPT_LENGTHS": "32=3,256=1", "LOADTEST_MAX_TOKENS": "16"}


def locust_command(run_dir: Path, host: str, admin_url: str | None, extra: list[str]) -> list[str]:
    """Locust headless, CSV and HTML into `run_dir`; the summary lands there too."""
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", host]
    argv += ["--csv", str(run_dir / "locust"), "--html", str(run_dir / "report.html")]
    if admin_url:
        argv += ["--admin-url", admin_url]
    return argv + extra


class Flipper:
    """Flips the default split with `graystack weight` every `every` seconds through `weights` (the
    zero-layer's percent), in a thread; `flips` records (time, weight, exit code)."""

    def __init__(self, admin_url: str, every: float, weights: list[int]) -> None:
        self.admin_url = admin_url
        self.every = every
        self.weights = weights
        self.flips: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def flip(self, weight: int) -> int:
        argv = [
            sys.executable,
            "-m",
            "graystack",
            "weight",
            f"zero-layer={weight}",
            "--admin-url",
            self.admin_url,
        ]
        code = subprocess.run(argv, capture_output=True, timeout=60).returncode
        self.flips.append((time.time(), weight, code))
        return code

    def __enter__(self) -> Flipper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)

    def _run(self) -> None:
        """A flip every `every` seconds on the clock, however long each takes to be ACKed (waiting
        `every` after each one stretched the cadence by the CLI's start and the ACK, a second or more
        on a loaded machine)."""
        due = time.monotonic()
        for weight in itertools.cycle(self.weights):
            due += self.every
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            self.flip(weight)


def wait_for(process: ManagedProcess, timeout: float | None) -> int:
    """Locust's exit code; stopped by PID (SIGTERM: it still writes its summary) past `timeout`."""
    try:
        return process.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.stop(grace=30)
        return process.popen.returncode


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run-dir", type=Path, default=Path("runs") / time.strftime("soak-%Y%m%d-%H%M%S"))
    parser.add_argument("--host", default="", help="the gateway's URL; empty: start a local stack")
    parser.add_argument("--admin-url", default=os.environ.get("LOADTEST_ADMIN_URL", ""))
    parser.add_argument("--flip-every", type=float, default=0, help="seconds between flips; 0: no flips")
    parser.add_argument("--flip-weights", default="20,50,80,0,100", help="zero-layer percents, cycled")
    args, extra = parser.parse_known_args()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    stack = None
    if not args.host:
        from graystack.local.rollout_stack import RolloutStack

        envoy = shutil.which("envoy") or str(Path(sys.executable).with_name("envoy"))
        stack = RolloutStack(args.run_dir / "stack", envoy, LOCAL_ANALYSIS)
        for name, value in LOCAL_MIX.items():
            os.environ[name] = os.environ.get(name) or value
    weights = [int(w) for w in args.flip_weights.split(",")]
    try:
        if stack is not None:
            stack.start()
            args.host, args.admin_url = str(stack.client.base_url).rstrip("/"), stack.admin_url
        if args.admin_url and stack is not None:
            Flipper(args.admin_url, 0, weights).flip(weights[0])
        locust = start_process(
            "locust", locust_command(args.run_dir, args.host, args.admin_url, extra), args.run_dir
        )
        print(f"locust (pid {locust.pid}) against {args.host}; log: {locust.log_path}", flush=True)
        flipping = args.flip_every > 0 and args.admin_url
        with (
            Flipper(args.admin_url, args.flip_every, weights[1:] + weights[:1]) if flipping else nullcontext()
        ):
            code = wait_for(locust, None)
    finally:
        if stack is not None:
            stack.stop()
    summary = args.run_dir / "summary.txt"
    print(summary.read_text() if summary.exists() else "no summary was written", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
