"""Shared incidents (both variants fail alike): how often the candidate is blamed, simulated through the
shipped error checks (bench/shipped_rules.ErrorTests: the kernels and the rule the controller runs).

Two rules side by side on the same draws:
  race        before issue 38: a failing check was shared when the baseline's own test (its e-value or
              its change detector) had fired by then, so which test fired first decided, a race the
              baseline won by carrying more traffic (decided at the candidate's first failing look:
              the look the machine acts on)
  comparison  shipped: a failing check is the candidate's once its errors are shown above the
              baseline's at equal exposure (the errors' split against the request shares, an e-process),
              shared once the baseline's own test fired and the comparison did not, held until either
              (gateway/rollout/checks/errors.py); error_ratio (max_error_ratio x the baseline's) rolls
              back on its own
Blamed: the first decision is the candidate's (a rollback even under `on_shared_incident: hold`); for
the comparison also at any look of the incident (held, the checks go on, and one that later tells the
candidate apart rolls back). Traffic: Poisson requests per look, split by the stage's weight; HEALTHY
errors for WARM looks, then every request of both fails at INCIDENT for INCIDENT_SECONDS. The plan: the
seed spec's (max_error_rate 0.3 %, a look every 5 s), and the shared-incident integration test's
(max_error_rate 1 %, min_detectable 5 %, 30 req/s, a look a second, 20 % errors).

    python -m bench.shared_incident [--runs N] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.shipped_rules import LOOK_SECONDS, ErrorTests, seed_plan, seed_spec
from gateway.rollout.checks.errors import Blame
from gateway.rollout.plan import Plan, plan_for
from gateway.spec.model import validate_spec

WEIGHTS = (5, 10, 20, 50)
HEALTHY = 0.001
WARM = 60  # healthy looks before the incident
INCIDENT_SECONDS = 600
BLOCK = 250  # runs simulated together
SEED_CASES = ((80.0, 0.01), (80.0, 0.05), (20.0, 0.05))  # (total req/s, incident error rate)
TEST_CASE = (30.0, 0.2)  # tests/integration/test_rollout_decisions.py's shared-incident test


def integration_test_plan() -> Plan:
    """The shared-incident integration test's: the seed spec at its analysis settings, a look a second."""
    analysis = {"interval": "1s", "max_error_rate": 0.01, "min_detectable_error_rate": 0.05}
    return plan_for(validate_spec(seed_spec(analysis=analysis)))


COUNTINGS = ("as counted", "as counted before", "once each")


def counts(
    rng: np.random.Generator, look: float, rps: float, weight: int, rate: np.ndarray, runs: int, counting: str
) -> tuple[np.ndarray, ...]:
    """(cand_n, cand_x, base_n, base_x) per run and look. Each failed attempt is retried once: the
    candidate's on the baseline (its fallback), the baseline's on itself, and every attempt counts as the
    variant's that made it. `as counted`: as the providers count with `retries.fallback` and one retry
    (gateway/metrics/direct.py), each failed attempt once, a failed fallback the baseline's; `as counted
    before`: as they counted before issue 38, a failed fallback the candidate's too (and not the
    baseline's, whose attempts include it); `once each`: no retries, every request once."""
    shape = (runs, len(rate))
    ours = rng.poisson(rps * look * weight / 100, shape)
    theirs = rng.poisson(rps * look * (100 - weight) / 100, shape)
    failed_ours, failed_theirs = rng.binomial(ours, rate), rng.binomial(theirs, rate)
    if counting == "once each":
        return ours, failed_ours, theirs, failed_theirs
    fallbacks_failed, retries_failed = rng.binomial(failed_ours, rate), rng.binomial(failed_theirs, rate)
    attempts = theirs + failed_theirs + failed_ours
    if counting == "as counted":
        return ours, failed_ours, attempts, failed_theirs + retries_failed + fallbacks_failed
    return ours, np.minimum(ours, failed_ours + fallbacks_failed), attempts, failed_theirs + retries_failed


def first(looks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run: whether any look is set, and the first that is."""
    return np.asarray(looks.any(axis=1)), np.asarray(looks.argmax(axis=1))


def incidents(
    plan: Plan, look: float, rps: float, weight: int, incident: float, runs: int, counting: str
) -> dict[str, Any]:
    """Both rules over `runs` incidents: the share blamed on the candidate, seconds from onset to the
    first decision (median), the share left undecided within the incident, and (comparison) the share
    blamed at any look of it."""
    rng = np.random.default_rng(weight)
    rate = np.where(np.arange(WARM + int(INCIDENT_SECONDS / look)) < WARM, HEALTHY, incident)
    raced, race_fired, race_at, blamed_first, blamed_any, decided, decided_at = ([] for _ in range(7))
    for start in range(0, runs, BLOCK):
        size = min(BLOCK, runs - start)
        found = ErrorTests(plan, size).judged(*counts(rng, look, rps, weight, rate, size, counting))
        everyone = np.arange(size)
        # the race: at the candidate's first failing look, its own unless the baseline's test fired too
        fired, at = first(found.failing)
        raced.append(fired & ~found.baseline_failing[everyone, at])
        race_fired.append(fired)
        race_at.append(at[fired])
        own = (found.failing & (found.whose == Blame.CANDIDATE)) | found.ratio
        told, at = first(own | (found.failing & (found.whose == Blame.SHARED)))
        blamed_first.append(told & own[everyone, at])
        blamed_any.append(own.any(axis=1))
        decided.append(told)
        decided_at.append(at[told])

    def seconds(at: list[np.ndarray]) -> float:
        return float(np.median((np.concatenate(at) - WARM + 1) * look))

    def share(flags: list[np.ndarray]) -> float:
        return round(float(np.concatenate(flags).mean()), 4)

    return {
        "race": {
            "candidate_blamed": share(raced),
            "undecided": round(1 - share(race_fired), 4),
            "decision_seconds_p50": seconds(race_at),
        },
        "comparison": {
            "candidate_blamed": share(blamed_first),
            "candidate_blamed_within_incident": share(blamed_any),
            "undecided": round(1 - share(decided), 4),
            "decision_seconds_p50": seconds(decided_at),
        },
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
    cases = [("seed", seed, LOOK_SECONDS, rps, incident) for rps, incident in SEED_CASES]
    cases.append(("test", test, 1.0, *TEST_CASE))
    results: dict[str, Any] = {}
    for counting in COUNTINGS:
        for name, plan, look, rps, incident in cases:
            for weight in WEIGHTS:
                key = f"{name}, {counting}: {rps:g} req/s, {incident:.0%} errors, weight {weight}"
                results[key] = incidents(plan, look, rps, weight, incident, args.runs, counting)
                print(key, results[key], flush=True)
    parameters = {
        "weights": WEIGHTS,
        "healthy": HEALTHY,
        "warm_looks": WARM,
        "incident_seconds": INCIDENT_SECONDS,
        "seed_cases": SEED_CASES,
        "test_case": TEST_CASE,
        "runs": args.runs,
    }
    path = write_result("shared_incident", parameters, results, args.out)
    print(f"{path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
