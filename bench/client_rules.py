"""Cohorts and the error tests: each request as an observation against each client once per stage.

With `routing.affinity` a client's requests all go to its cohort's variant. Heterogeneous clients
(heavy-tailed activity, a few carrying a large share; a few "troubled" ones whose requests fail far more
often) make a cohort's error rate differ from the population's by the luck of the hash, and counted per
request, that make-up is evidence against a healthy candidate. The shipped method
(gateway/metrics/client_units.py) counts each client once per variant and stage, its first answer there.

Population, per simulated rollout: CLIENTS_PER_RPS clients per request a second of total traffic; each
client's rate Lomax (Pareto II) with shape ACTIVITY_SHAPE (the top 1 % of clients carry about half of
the requests); a share TROUBLED of them fail TROUBLED_FACTOR times as often as the rest (a bot whose
prompts time out, an integration sending what a server cannot take), rescaled so
the population's per-request error rate is HEALTHY_RATE (a third of the 0.3 % threshold) in every run;
each client's cohort position uniform (Envoy's hash of its key). Both variants are healthy: a client
fails as often on either. The seed's rollout (bench.decision_rules.SEED_STAGES: shadow 1 h with every
request mirrored, 5 % for 2 days, 20 % for 4, 100 % for 7, the guard on), one look every 5 s.

  per_request  every answer counts: a look's requests are Poisson at the cohort's rate and its errors
               binomial at the cohort's request-weighted error rate
  clients      each client's first answer on a variant in a stage: at an exponential time at its own
               rate from the stage's start (the shadow stage's copies at the same time as the
               originals), failed with its own probability

Both feed the shipped error tests (E1, the change detector E2, R1 against the baseline) through the
kernels the controller runs (bench/shipped_rules.ErrorTests), levels from the seed plan.

false_rollbacks: the share of rollouts some look rolls back, per counting.
detection: a 5 % stage, the candidate's every answer failing with an extra probability from the start or
  after 30 healthy minutes: seconds from onset to the first firing look, per counting.

    python -m bench.client_rules [--trials N] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.decision_rules import HORIZON, LATE_LOOKS, REGRESSIONS, SEED_STAGES, STAGE_SHARE, Job, run_jobs
from bench.shipped_rules import LOOK_SECONDS, ErrorTests, seed_plan

CLIENTS_PER_RPS = 1000  # clients per req/s of total traffic: a client sends 3.6 requests an hour on average
ACTIVITY_SHAPE = 1.1
TROUBLED, TROUBLED_FACTOR = 0.01, 200.0
HEALTHY_RATE = 0.001
TOTAL_RPS = (20, 80)
COUNTINGS = ("per_request", "clients")
CELLS = 4_000_000  # runs x clients simulated together (a float array of them: 32 MB)
CHUNK = 120  # looks per call of the tests' kernels


@dataclass
class Population:
    """Per run (rows) and client (columns): requests a second, error probability, cohort position."""

    rate: np.ndarray
    errors: np.ndarray
    position: np.ndarray


def population(rng: np.random.Generator, runs: int, total_rps: float) -> Population:
    clients = int(total_rps * CLIENTS_PER_RPS)
    activity = rng.pareto(ACTIVITY_SHAPE, (runs, clients)) + 1.0
    rate = activity * (total_rps / activity.sum(axis=1, keepdims=True))
    errors = np.where(rng.random((runs, clients)) < TROUBLED, TROUBLED_FACTOR, 1.0)
    errors *= HEALTHY_RATE / ((rate * errors).sum(axis=1, keepdims=True) / total_rps)
    return Population(rate, np.minimum(errors, 1.0), rng.random((runs, clients)))


def _stages() -> list[tuple[float, bool, int]]:
    """(candidate share, shadowing, looks) of the seed's rollout."""
    return [(share, i == 0, int(seconds / LOOK_SECONDS)) for i, (share, seconds) in enumerate(SEED_STAGES)]


def _sides(people: Population, share: float, shadowing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Which clients the candidate and the baseline serve in a stage (the shadow stage: both, everyone)."""
    if shadowing:
        everyone = np.ones(people.rate.shape, dtype=bool)
        return everyone, everyone
    candidate = people.position < share
    return candidate, ~candidate


def side_rates(people: Population, side: np.ndarray, extra: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per run: the side's requests a second, and its request-weighted error rate with every answer
    failing with probability `extra` on top of its client's own."""
    weights = people.rate * side
    rate = weights.sum(axis=1)
    failing = 1 - (1 - people.errors) * (1 - extra)
    return rate, np.divide((weights * failing).sum(axis=1), rate, out=np.zeros_like(rate), where=rate > 0)


def request_counts(
    rng: np.random.Generator, rate: np.ndarray, error_rate: np.ndarray, looks: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per request: (runs, looks) Poisson requests at `rate`, binomial errors at `error_rate` (runs,) or
    (runs, looks)."""
    n = rng.poisson(rate[:, None] * LOOK_SECONDS, (len(rate), looks))
    return n, rng.binomial(
        n, np.broadcast_to(error_rate if error_rate.ndim == 2 else error_rate[:, None], n.shape)
    )


def first_answers(
    rng: np.random.Generator,
    people: Population,
    side: np.ndarray,
    first: np.ndarray,
    looks: int,
    extra: float = 0.0,
    onset: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per client once: (runs, looks) clients whose first answer came in each look, and failed ones
    (from look `onset` on, with probability `extra` on top of the client's own). `first`: each
    client's first request's time in the stage (s), shared by a shadow copy and its original."""
    row, at, failed = _first_seen(rng, people, side, first, looks, extra, onset)
    return _per_look(row, at, failed, len(first), looks)


def observed_first_answers(
    rng: np.random.Generator,
    people: Population,
    sides: tuple[np.ndarray, np.ndarray],
    first: np.ndarray,
    looks: int,
) -> tuple[np.ndarray, ...]:
    """`first_answers` of the candidate's and the baseline's side (the same draws, in that order),
    kept only at the looks where some run's either side has a first answer: the rest change no test
    (E2 takes no step without data), and in a stage of days they are most of its looks."""
    seen = [_first_seen(rng, people, side, first, looks) for side in sides]
    kept = np.unique(np.concatenate([at for _, at, _ in seen]))
    counts: list[np.ndarray] = []
    for row, at, failed in seen:
        counts += _per_look(row, np.searchsorted(kept, at), failed, len(first), len(kept))
    return tuple(counts)


def _first_seen(
    rng: np.random.Generator,
    people: Population,
    side: np.ndarray,
    first: np.ndarray,
    looks: int,
    extra: float = 0.0,
    onset: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each first answer in the stage on `side`: its run, its look, whether it failed."""
    look = (first // LOOK_SECONDS).astype(np.int64)
    row, column = np.nonzero(side & (look < looks))
    at = look[row, column]
    p = people.errors[row, column]
    failed = rng.random(len(at)) < np.where(at >= onset, 1 - (1 - p) * (1 - extra), p)
    return row, at, failed


def _per_look(
    row: np.ndarray, at: np.ndarray, failed: np.ndarray, runs: int, looks: int
) -> tuple[np.ndarray, np.ndarray]:
    """First answers and failed ones counted per run and look (runs, looks)."""
    flat = row * looks + at
    n = np.bincount(flat, minlength=runs * looks).reshape(runs, looks)
    x = np.bincount(flat, weights=failed, minlength=runs * looks).reshape(runs, looks).astype(np.int64)
    return n, x


def _fires(tests: ErrorTests, counts: tuple[np.ndarray, ...]) -> np.ndarray:
    """Which runs' tests fire at some look, fed CHUNK looks at a time."""
    fired = np.zeros(len(counts[0]), dtype=bool)
    for i in range(0, counts[0].shape[1], CHUNK):
        fired |= tests.looks(*(c[:, i : i + CHUNK] for c in counts)).any(axis=1)
    return fired


def false_rollbacks(total_rps: float, trials: int, seed: int) -> list[dict[str, Any]]:
    """One row per counting: the share of seed rollouts with a rollback, both variants healthy."""
    rng = np.random.default_rng(seed)
    plan = seed_plan()
    fired = {counting: np.zeros(0, dtype=bool) for counting in COUNTINGS}
    block_runs = max(1, CELLS // int(total_rps * CLIENTS_PER_RPS))
    for start in range(0, trials, block_runs):
        runs = min(block_runs, trials - start)
        people = population(rng, runs, total_rps)
        tests = {counting: ErrorTests(plan, runs) for counting in COUNTINGS}
        block = {counting: np.zeros(runs, dtype=bool) for counting in COUNTINGS}
        for share, shadowing, looks in _stages():
            cand, base = _sides(people, share, shadowing)
            first = rng.exponential(1.0 / people.rate)
            unit_counts = observed_first_answers(rng, people, (cand, base), first, looks)
            block["clients"] |= _fires(tests["clients"], unit_counts)
            (cand_rate, cand_errors), (base_rate, base_errors) = (
                side_rates(people, cand),
                side_rates(people, base),
            )
            for i in range(0, looks, CHUNK):
                size = min(CHUNK, looks - i)
                counts = (
                    *request_counts(rng, cand_rate, cand_errors, size),
                    *request_counts(rng, base_rate, base_errors, size),
                )
                block["per_request"] |= tests["per_request"].looks(*counts).any(axis=1)
        for counting in COUNTINGS:
            fired[counting] = np.concatenate([fired[counting], block[counting]])
    return [
        {"counting": counting, "total_rps": total_rps, "clients": int(total_rps * CLIENTS_PER_RPS),
         "rollouts": trials, "share": round(float(fired[counting].mean()), 5)}
        for counting in COUNTINGS
    ]  # fmt: skip


def detection(total_rps: float, name: str, late: bool, trials: int, seed: int) -> list[dict[str, Any]]:
    """One row per counting: detection times of an error regression on the candidate at a 5 % stage."""
    rng = np.random.default_rng(seed)
    kind, extra = REGRESSIONS[name]
    if kind != "error":
        raise ValueError(f"{name}: only error regressions are simulated here")
    plan = seed_plan()
    onset = LATE_LOOKS if late else 0
    looks = onset + int(HORIZON[kind] / LOOK_SECONDS)
    people = population(rng, trials, total_rps)
    cand, base = _sides(people, STAGE_SHARE, shadowing=False)
    first = rng.exponential(1.0 / people.rate)
    (cand_rate, healthy), (_, regressed) = side_rates(people, cand), side_rates(people, cand, extra)
    base_rate, base_errors = side_rates(people, base)
    after = np.arange(looks) >= onset
    counts = {
        "per_request": (
            *request_counts(rng, cand_rate, np.where(after, regressed[:, None], healthy[:, None]), looks),
            *request_counts(rng, base_rate, base_errors, looks),
        ),
        "clients": (
            *first_answers(rng, people, cand, first, looks, extra, onset),
            *first_answers(rng, people, base, first, looks),
        ),
    }
    rows = []
    for counting, observed in counts.items():
        fires = ErrorTests(plan, trials).looks(*observed)
        early = fires[:, :onset].any(axis=1)
        found = fires[:, onset:]
        detected = found.any(axis=1) & ~early
        delays = (found.argmax(axis=1)[detected] + 1) * LOOK_SECONDS
        rows.append(
            {
                "counting": counting, "total_rps": total_rps, "candidate_rps": total_rps * STAGE_SHARE,
                "clients": int(total_rps * CLIENTS_PER_RPS), "regression": name, "late": late,
                "median_s": float(np.median(delays)) if len(delays) else None,
                "p90_s": float(np.percentile(delays, 90)) if len(delays) else None,
                "detected_share": round(float(detected.sum() / max(1, (~early).sum())), 4),
                "false_before_onset": round(float(early.mean()), 4),
            }
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400, help="simulated rollouts per traffic level")
    parser.add_argument("--detection-trials", type=int, default=200, help="runs per detection cell")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/client_rules.json")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    errors = [name for name, (kind, _) in REGRESSIONS.items() if kind == "error"]
    jobs: list[Job] = [(false_rollbacks, (rps, args.trials, 3000 + i)) for i, rps in enumerate(TOTAL_RPS)]
    jobs += [
        (detection, (rps, name, late, args.detection_trials, 4000 + i))
        for i, (rps, name, late) in enumerate(
            (r, n, late) for r in TOTAL_RPS for n in errors for late in (False, True)
        )
    ]
    false, found = run_jobs(jobs, args.workers)
    for row in false:
        print(f"false rollbacks {row['counting']:12} {row['total_rps']:>3} req/s: {row['share']:.2%}")
    for row in found:
        print(f"detection {row['counting']:12} {row['regression']:9} {row['total_rps']:>3} req/s "
              f"late={row['late']!s:5} median {row['median_s']} s, detected {row['detected_share']:.0%}")  # fmt: skip
    plan = seed_plan()
    params = {
        "look_seconds": LOOK_SECONDS, "trials": args.trials, "detection_trials": args.detection_trials,
        "seed_stages": SEED_STAGES, "budget": plan.alpha * len(plan.tests), "tests": list(plan.tests),
        "clients_per_rps": CLIENTS_PER_RPS, "activity_shape": ACTIVITY_SHAPE, "troubled": TROUBLED,
        "troubled_factor": TROUBLED_FACTOR, "healthy_rate": HEALTHY_RATE, "stage_share": STAGE_SHARE,
        "horizon_s": HORIZON["error"], "late_s": LATE_LOOKS * LOOK_SECONDS,
        "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_result("client_rules", params, {"false_rollbacks": false, "detection": found}, args.out)


if __name__ == "__main__":
    main()
