"""The whole test suite on a quiet machine or with CPU-burning processes beside it (issue 34): a machine
about half as fast, as a contributor's laptop or a busy CI box is. Finds the tests that assert what a fixed
time achieves, and measures the suite's time both ways.

    python -m bench.suite_load --burners 2      # the CPUs halved on a 2-core box
    python -m bench.suite_load --burners 0      # quiet
    python -m bench.suite_load --ci --burners 2 # .ci/run on a fresh clone of HEAD, installs included

Writes bench/results/suite_load_<burners>.json (with --ci, ci_load_<burners>.json): wall seconds,
pytest's closing lines (`make test` runs pytest three times: side by side, the paced tests, the default
mix), the failed tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burners", type=int, default=2, help="busy processes beside the suite")
    parser.add_argument("--ci", action="store_true", help="run .ci/run on a fresh clone of HEAD instead")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (default: the whole suite)")
    args = parser.parse_args()
    clone = None
    if args.ci:
        clone = Path(tempfile.mkdtemp(prefix="ci-load-"))
        subprocess.run(["git", "clone", "--quiet", str(Path(__file__).parent.parent), str(clone)], check=True)
        command, cwd = [str(clone / ".ci" / "run")], clone
    else:
        command, cwd = (
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args],
            None,
        )
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
    started = time.monotonic()
    try:
        environment = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        run = subprocess.run(
            command, cwd=cwd, env={**environment, "CI": "true"}, capture_output=True, text=True
        )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    log = Path(tempfile.gettempdir()) / f"{'ci' if args.ci else 'suite'}_load_{args.burners}.log"
    log.write_text(run.stdout + run.stderr)
    if clone is not None and run.returncode == 0:
        shutil.rmtree(clone)  # its venvs take gigabytes; a failed one stays to be read
    lines = run.stdout.splitlines()
    result = {
        "command": ".ci/run on a fresh clone" if args.ci else "pytest",
        "burners": args.burners,
        "cpus": os.cpu_count(),
        "wall_s": round(time.monotonic() - started),
        "returncode": run.returncode,
        "summaries": [
            line for line in lines if re.match(r"^[\d, a-z]*\d+ (passed|failed).* in [\d.]+s", line)
        ],
        "failed": [line.split(" ")[1] for line in lines if line.startswith("FAILED ")],
    }
    RESULTS.mkdir(exist_ok=True)
    name = "ci_load" if args.ci else "suite_load"
    (RESULTS / f"{name}_{args.burners}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2), f"output: {log}", sep="\n")


if __name__ == "__main__":
    main()
