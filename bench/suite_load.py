"""The whole test suite on a quiet machine or with CPU-burning processes beside it (issue 34): a machine
about half as fast, as a contributor's laptop or a busy CI box is. Finds the tests that assert what a fixed
time achieves, and measures the suite's time both ways.

    python -m bench.suite_load --burners 2      # the CPUs halved on a 2-core box
    python -m bench.suite_load --burners 0      # quiet

Writes bench/results/suite_load_<burners>.json: wall seconds, pytest's closing line, the failed tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burners", type=int, default=2, help="busy processes beside the suite")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (default: the whole suite)")
    args = parser.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
    started = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args],
            env={**os.environ, "CI": "true"},
            capture_output=True,
            text=True,
        )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    lines = run.stdout.splitlines()
    result = {
        "burners": args.burners,
        "cpus": os.cpu_count(),
        "wall_s": round(time.monotonic() - started),
        "returncode": run.returncode,
        "summary": next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), None),
        "failed": [line.split(" ")[1] for line in lines if line.startswith("FAILED ")],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"suite_load_{args.burners}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
