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

`--hold`: under `on_shared_incident: hold`, look by look as the machine runs it (gateway/rollout/
incident.py) on the shipped counting: a shared failure holds and starts the threshold tests anew (the
comparisons go on); a look whose new tests have fired (shared, or not yet told whose) restarts the quiet
period, and the tests too once they have run `incident_clear`; INCIDENT_CLEAR seconds of looks whose error tests have not fired end the
hold; the candidate's own failure rolls back at any look. The incident ends after `--incident-seconds`
(INCIDENT_SECONDS) and AFTER_SECONDS of healthy looks follow. Reported: the share of incidents held, rolled back, gone on by
themselves by the end (and before the incident ended: too early, held again if it fires again), the
seconds from the incident's end to the resume that stands, and the tests' starts per incident (each
spends the false-rollback budget again).

    python -m bench.shared_incident [--runs N] [--out PATH] [--hold]
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
HOLD_WEIGHTS = (5, 20, 50)
INCIDENT_CLEAR = 300.0  # analysis.incident_clear's default
AFTER_SECONDS = 3 * INCIDENT_CLEAR + 60  # healthy looks after the incident: a restart and a quiet period
NORMAL, HELD, RESUMED, ROLLED_BACK = range(4)  # a run's state under `hold`


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


def holds(
    plan: Plan, look: float, rps: float, weight: int, incident: float, runs: int, seconds: float
) -> dict[str, Any]:
    """`runs` incidents of `seconds` under `on_shared_incident: hold`, every run one look at a time
    (module docstring)."""
    rng = np.random.default_rng(weight)
    during, total = int(seconds / look), WARM + int((seconds + AFTER_SECONDS) / look)
    looks = np.arange(total)
    rate = np.where((looks >= WARM) & (looks < WARM + during), incident, HEALTHY)
    seen = counts(rng, look, rps, weight, rate, runs, "as counted")
    tests, phase = ErrorTests(plan, runs), np.full(runs, NORMAL)
    tests_since, quiet_since, resumed_at = np.zeros(runs), np.zeros(runs), np.full(runs, np.nan)
    held, starts, first_resume = np.zeros(runs, dtype=int), np.zeros(runs, dtype=int), np.full(runs, np.nan)
    for i in looks:
        t = i * look
        found = tests.judged(*(counted[:, i : i + 1] for counted in seen))
        failing, whose, ratio = found.failing[:, 0], found.whose[:, 0], found.ratio[:, 0]
        own = (failing & (whose == Blame.CANDIDATE)) | ratio
        phase[own & (phase != ROLLED_BACK)] = ROLLED_BACK
        new = failing & (whose == Blame.SHARED) & ((phase == NORMAL) | (phase == RESUMED))
        watching = (phase == HELD) & ~new
        unquiet = watching & failing  # shared again, or fired and not yet told whose
        stale = unquiet & (t - tests_since >= INCIDENT_CLEAR)
        restart = new | stale
        phase[new], held[new] = HELD, held[new] + 1
        tests_since[restart], quiet_since[new | unquiet] = t, t
        over = watching & ~failing & (t - quiet_since >= INCIDENT_CLEAR)
        phase[over], resumed_at[over] = RESUMED, t
        first_resume[over & np.isnan(first_resume)] = t
        starts[restart] += 1
        tests.after_incident(restart)
    end = (WARM + during) * look
    was_held = held > 0
    gone_on = was_held & (phase == RESUMED)
    after_end = resumed_at[gone_on & (resumed_at >= end)] - end

    def share(flags: np.ndarray, of: np.ndarray = was_held) -> float:
        return round(float(flags[of].mean()), 4) if of.any() else 0.0

    def quantile(q: float) -> float | None:
        return float(np.quantile(after_end, q)) if after_end.size else None

    return {
        "held": round(float(was_held.mean()), 4),
        "rolled_back": round(float((phase == ROLLED_BACK).mean()), 4),
        "of the held": {
            "went_on_by_itself": share(gone_on),
            "still_held_at_the_end": share(phase == HELD),
            "rolled_back": share(phase == ROLLED_BACK),
            "went_on_before_the_incident_ended": share(first_resume < end),
            "held_again": share(held > 1),
            "test_starts_p50": float(np.median(starts[was_held])) if was_held.any() else None,
            "test_starts_max": int(starts.max()),
        },
        "seconds_from_the_end_to_going_on": {
            "p10": quantile(0.1), "p50": quantile(0.5), "p90": quantile(0.9), "max": quantile(1.0)
        },
        "runs": runs,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--hold", action="store_true", help="under on_shared_incident: hold (module doc)")
    parser.add_argument("--incident-seconds", type=float, default=INCIDENT_SECONDS, help="with --hold")
    args = parser.parse_args()
    started = time.perf_counter()
    seed, test = seed_plan(), integration_test_plan()
    cases = [("seed", seed, LOOK_SECONDS, rps, incident) for rps, incident in SEED_CASES]
    cases.append(("test", test, 1.0, *TEST_CASE))
    results: dict[str, Any] = {}
    if args.hold:
        for name, plan, look, rps, incident in cases:
            for weight in HOLD_WEIGHTS:
                key = f"{name}, hold: {rps:g} req/s, {incident:.0%} errors, weight {weight}"
                results[key] = holds(plan, look, rps, weight, incident, args.runs, args.incident_seconds)
                print(key, results[key], flush=True)
        hold = {"weights": HOLD_WEIGHTS, "incident_clear": INCIDENT_CLEAR, "after_seconds": AFTER_SECONDS}
        parameters = {
            "healthy": HEALTHY,
            "warm_looks": WARM,
            "incident_seconds": args.incident_seconds,
            **hold,
        }
        parameters.update(seed_cases=SEED_CASES, test_case=TEST_CASE, runs=args.runs)
        path = write_result("shared_incident", parameters, results, args.out)
        print(f"{path} ({time.perf_counter() - started:.0f} s)")
        return
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
