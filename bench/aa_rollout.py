"""An A/A rollout on the real stack, with and without cohorts: time to promotion and requests per stage.

tests/support/aa_run.py's run, as tests/integration/test_aa_rollout.py runs it: the same trained
checkpoint served twice by `graystack serve --variant baseline`, behind variants `a` and `b` under
`graystack up --upstream`, the locustfile's default mix at 12 users (with cohorts: `routing.affinity` on
`x-user-id`, half of them its conversation user), `max_ttft_p95: null`, `min_detectable_error_rate: 0.05`,
each step held 2 s. The two kinds take turns run by run, so load on the machine falls on both alike.
Time counts from Locust's start; a stage's requests are the candidate's, as the guard counted them (with
cohorts, a client once per stage).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench._common import envoy_binary, summarize, write_result
from tests.support.aa_run import ANALYSIS, MIN_DETECTABLE, STEPS, USERS, clean_env, run_aa
from tests.support.trained import train_pipeline

KINDS = {"split": False, "cohorts": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="rollouts per kind")
    parser.add_argument("--steps", default=",".join(map(str, STEPS)), help="the candidate's percent per step")
    parser.add_argument(
        "--weights", type=Path, help="a `make weights` folder (default: trained here, CI-sized)"
    )
    parser.add_argument("--limit", type=float, default=1200, help="seconds a rollout may take")
    args = parser.parse_args()
    steps = tuple(int(w) for w in args.steps.split(","))
    envoy_binary()  # `up` finds the same one; missing, this says how to install it
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="aa-rollout-") as workdir:
        weights = args.weights or train_pipeline(Path(workdir) / "weights")
        for i in range(args.runs):
            for kind, cohorts in KINDS.items():
                where = Path(workdir) / f"{kind}-{i}"
                where.mkdir()
                outcome = run_aa(
                    where, clean_env(where), weights / "baseline.safetensors", cohorts, args.limit, steps
                )
                runs[kind].append(outcome.as_json())
                print(f"run {i + 1}, {kind}: {outcome.phase} after {outcome.seconds:.0f} s, {outcome.stages}")
    results = {
        kind: {"seconds_to_end": summarize([r["seconds_to_end"] for r in done], digits=1), "runs": done}
        for kind, done in runs.items()
    }
    analysis = {**ANALYSIS, "min_detectable_error_rate": MIN_DETECTABLE}
    parameters = {"users": USERS, "steps": steps, "hold_s": 2, "analysis": analysis, "runs": args.runs}
    print(write_result("aa_rollout", parameters, results))


if __name__ == "__main__":
    main()
