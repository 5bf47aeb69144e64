"""Shared incidents (both variants fail alike): how often the candidate's error test fires before the
baseline's, so the look calls it the candidate's fault (a rollback even under `on_shared_incident:
hold`), simulated through the shipped tests.

A look calls a failing error check shared when the baseline's own test (its e-value or its change
detector, gateway/rollout/analysis.py) has fired by then. Both variants see the same error rate, so which
fires first is a race that the baseline wins by carrying more traffic: the candidate's share of it
decides the odds. Traffic: Poisson requests per look, split by the stage's weight; HEALTHY errors for
WARM looks, then every request of both fails at INCIDENT. The plan: the seed spec's (max_error_rate 0.3 %,
a look every 5 s), and the shared-incident integration test's (max_error_rate 1 %, min_detectable 5 %,
30 req/s, a look a second, 20 % errors).

    python -m bench.shared_incident [--runs N] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.shipped_rules import LOOK_SECONDS, seed_plan, seed_spec
from gateway.rollout.checks.common import fired
from gateway.rollout.plan import Plan, plan_for
from gateway.rollout.sequential.errors import ThresholdTest
from gateway.spec.model import validate_spec

WEIGHTS = (5, 10, 20, 50)
HEALTHY = 0.001
WARM = 60  # healthy looks before the incident
SEED_CASES = ((80.0, 0.01), (80.0, 0.05), (20.0, 0.05))  # (total req/s, incident error rate)
TEST_CASE = (30.0, 0.2)  # tests/integration/test_rollout_decisions.py's shared-incident test


def integration_test_plan() -> Plan:
    """The shared-incident integration test's: the seed spec at its analysis settings, a look a second."""
    analysis = {"interval": "1s", "max_error_rate": 0.01, "min_detectable_error_rate": 0.05}
    return plan_for(validate_spec(seed_spec(analysis=analysis)))


def either_fired(test: ThresholdTest, plan: Plan) -> bool:
    return fired(test.log_evalue, plan.log_bound) or fired(test.log_detector, plan.log_detector_bound)


def race(
    plan: Plan, look: float, rps: float, weight: int, incident: float, runs: int, as_counted: bool
) -> dict[str, Any]:
    """Share of incidents the candidate's test calls first, and seconds from onset to the decision.
    `as_counted`: as the direct provider counts with `retries.fallback` (gateway/metrics/direct.py): a
    candidate's failed attempt is charged again when its fallback on the baseline fails too, and the
    baseline's attempts include the fallbacks it served but not their errors; False: every request once."""
    rng = np.random.default_rng(weight)
    per_look = (rps * look * weight / 100, rps * look * (100 - weight) / 100)
    blamed, seconds = 0, []
    for _ in range(runs):
        tests = [ThresholdTest.new(plan.max_error_rate), ThresholdTest.new(plan.max_error_rate)]
        looks = 0
        while True:
            rate = HEALTHY if looks < WARM else incident
            ours, theirs = (int(rng.poisson(mean)) for mean in per_look)
            failed_ours, failed_theirs = (int(rng.binomial(n, rate)) for n in (ours, theirs))
            if as_counted:  # each failed attempt is retried once: ours on the baseline, theirs on itself
                charged_ours = failed_ours + int(rng.binomial(failed_ours, rate))
                charged_theirs = failed_theirs + int(rng.binomial(failed_theirs, rate))
                counts = (
                    (ours, min(ours, charged_ours)),
                    (theirs + failed_theirs + failed_ours, charged_theirs),
                )
            else:
                counts = ((ours, failed_ours), (theirs, failed_theirs))
            tests = [test.update(n, x) for test, (n, x) in zip(tests, counts, strict=True)]
            looks += 1
            candidate, baseline = (either_fired(t, plan) for t in tests)
            if candidate or baseline:
                blamed += candidate and not baseline
                seconds.append((looks - WARM) * look)
                break
    return {
        "candidate_blamed": round(blamed / runs, 4),
        "decision_seconds_p50": float(np.median(seconds)),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    seed, test = seed_plan(), integration_test_plan()
    results: dict[str, Any] = {}
    for counting, as_counted in (("as counted", True), ("once each", False)):
        for rps, incident in SEED_CASES:
            for weight in WEIGHTS:
                key = f"seed, {counting}: {rps:g} req/s, {incident:.0%} errors, weight {weight}"
                results[key] = race(seed, LOOK_SECONDS, rps, weight, incident, args.runs, as_counted)
                print(key, results[key], flush=True)
        rps, incident = TEST_CASE
        for weight in WEIGHTS:
            key = f"test, {counting}: {rps:g} req/s, {incident:.0%} errors, weight {weight}"
            results[key] = race(test, 1.0, rps, weight, incident, args.runs, as_counted)
            print(key, results[key], flush=True)
    parameters = {
        "weights": WEIGHTS,
        "healthy": HEALTHY,
        "warm_looks": WARM,
        "seed_cases": SEED_CASES,
        "test_case": TEST_CASE,
        "runs": args.runs,
    }
    path = write_result("shared_incident", parameters, results, args.out)
    print(f"{path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
