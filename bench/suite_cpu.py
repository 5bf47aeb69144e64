"""CPU per test of `make test`'s first phase (issue 35): the phase is CPU-bound on two cores, so it gets
faster only by cutting CPU, and this says where it goes. Each test's CPU is its pytest worker's rusage
and its children's (the processes a test starts and stops by PID) over the test's setup, call and
teardown; a module-scoped fixture's cost lands on the test that built or stopped it.

    python -m bench.suite_cpu                      # phase 1 as `make test` runs it -> bench/results/suite_cpu.json
    python -m bench.suite_cpu --from DIR           # only summarise the per-worker records a run left in DIR

Run it on a quiet machine: it is the phase itself (about 8 minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).parent / "results" / "suite_cpu.json"
PHASE_1 = ["-n", "4", "--dist", "loadgroup", "-m", "not vllm and not paced and not alone"]
RECORDS = "SUITE_CPU_RECORDS"  # where each worker appends its tests' records


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """This module is also the plugin (`-p bench.suite_cpu`): one record per test."""
    own, children, started = *_cpu(), time.monotonic()
    yield
    own_after, children_after = _cpu()
    record = {
        "id": item.nodeid,
        "self": own_after - own,
        "children": children_after - children,
        "wall": time.monotonic() - started,
    }
    folder = Path(os.environ[RECORDS])
    with (folder / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl").open("a") as out:
        out.write(json.dumps(record) + "\n")


def summary(folder: Path) -> dict[str, Any]:
    """Totals, by kind of test (unit, integration, ...) and by module, heaviest first."""
    records = [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.open()]
    modules: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    kinds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for record in records:
        module = record["id"].split("::")[0]
        for totals in (modules[module], kinds[module.split("/")[1]]):
            totals["tests"] += 1
            totals["cpu_s"] += record["self"] + record["children"]
            totals["children_s"] += record["children"]
            totals["wall_s"] += record["wall"]

    def rounded(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        heaviest = sorted(rows.items(), key=lambda row: -row[1]["cpu_s"])
        return {name: {key: round(value, 1) for key, value in row.items()} for name, row in heaviest}

    return {
        "tests": len(records),
        "cpu_s": round(sum(r["self"] + r["children"] for r in records), 1),
        "by_kind": rounded(kinds),
        "by_module": rounded(modules),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--from", dest="records", type=Path, help="summarise the records in this folder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    folder, wall = args.records, None
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="suite-cpu-"))
        started = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "bench.suite_cpu",
                *PHASE_1,
            ],
            env={**os.environ, "CI": "true", RECORDS: str(folder)},
            check=False,
        )
        wall = round(time.monotonic() - started, 1)
    result = {"command": "python -m bench.suite_cpu", "phase": PHASE_1, "wall_s": wall, **summary(folder)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({key: result[key] for key in ("tests", "cpu_s", "wall_s", "by_kind")}, indent=1))


if __name__ == "__main__":
    main()
