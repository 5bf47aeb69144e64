"""Rollback decisions on simulated traffic: false rollbacks over the seed's rollout, and detection times.

Rules, each looking every 5 s (bench/shipped_rules.py, bench/retired_rules.py):
  shipped   the sequential tests as the controller runs them: errors against max_error_rate (E1), the
            change detector (E2), errors against the baseline (R1); for latency the TTFT SLO as an
            exceedance test (L1) and the TTFT shift test against the baseline (L2); levels from the
            seed spec's plan (a 1 % budget split across its tests, 90 days between detector alarms)
  previous  the window rule that shipped before (99 % over 60 s or 99.5 % over its last 15 s; p99
            ratio 1.5 and TTFT p95 2 s over the window, once it holds 100 requests)
  naive     the raw ratios over the window (Flagger's and Argo Rollouts' defaults)
Traffic: Poisson requests per look, binomial errors; TTFT lognormal (median 0.4 s, sigma 0.6), binned
into the model servers' buckets (inference/server/telemetry.py).

false_rollbacks: the seed's rollout (shadow 1 h with every request mirrored, 5 % for 2 days, 20 % for
  4 days, then 100 % for 7 days with the guard on), at total traffic 20-1,280 req/s, both variants
  healthy at 0.1 % or 0.2 % errors (a third, two thirds of the 0.3 % threshold): the share of rollouts
  that some look rolls back. Error rules only: healthy latency is covered by the simulations in
  tests/unit/test_sequential.py.
detection: the candidate at a 5 % stage (the baseline at 19x its rate, 0.1 % errors), a regression
  present from the start or after 30 healthy minutes (`late`): the time from onset to the first
  firing look, over runs that had not fired before it. `floor_s` is a bound over the best information
  rate I of the shipped tests (nats per second): from the start log(1/alpha) / I (no level-alpha test
  does better on average, Wald); late, the change detectors' threshold log A / I (no detector with A
  looks between false alarms on average does better in the worst case over when the change begins,
  Lorden 1971, Pollak 1985). That worst case is a change after arbitrarily long healthy traffic; after
  only 30 minutes the cumulative tests (R1 above all) have lost little to it, so at low rates they can
  come in under the late floor.

    python -m bench.decision_rules [--trials N] [--out PATH] [--regressions NAME ...] [--no-false-rollbacks]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, overload

import numpy as np
from scipy.stats import norm

from bench import retired_rules
from bench._common import write_result
from bench.shipped_rules import LOOK_SECONDS, ErrorTests, LatencyTests, error_floor, latency_floor, seed_plan
from inference.server.telemetry import TTFT_BUCKETS

RULES = ("shipped", "previous", "naive")
TOTAL_RPS = (20, 80, 320, 1280)
HEALTHY = (0.001, 0.002)
CANDIDATE_RPS = (1, 4, 16, 64)
REGRESSIONS = {
    "error_1%": ("error", 0.01),
    "error_2%": ("error", 0.02),
    "error_5%": ("error", 0.05),
    "error_20%": ("error", 0.2),
    "ttft_x1.5": ("ttft", 1.5),
    "ttft_x2": ("ttft", 2.0),
}
HOUR = 3600
SEED_STAGES = ((1.0, 1 * HOUR), (0.05, 48 * HOUR), (0.2, 96 * HOUR), (1.0, 168 * HOUR))  # (share, seconds)
WINDOW_LOOKS, RECENT_LOOKS = 12, 3  # the previous rule's 60 s window and 15 s recent part
LATE_LOOKS = 360  # 30 healthy minutes
HORIZON = {"error": 2 * HOUR, "ttft": HOUR}  # seconds after onset a detection run lasts
STAGE_SHARE = 0.05
BASELINE_ERRORS = 0.001
TTFT_MEDIAN, TTFT_SIGMA = 0.4, 0.6
CHUNK = 60  # looks simulated per batch (5 minutes: small enough for the CPU's caches)
RUNS_PER_BLOCK = 16  # detection: runs whose hours of looks are simulated together, for the same reason
EDGES = np.asarray(TTFT_BUCKETS)
Job = tuple[Callable[..., list[dict[str, Any]]], tuple[Any, ...]]  # (function, its arguments): rows


def _stage_looks() -> list[tuple[float, bool, int]]:
    """(candidate share, shadowing, looks) of the seed's rollout."""
    return [(share, i == 0, int(seconds / LOOK_SECONDS)) for i, (share, seconds) in enumerate(SEED_STAGES)]


def false_rollbacks(total_rps: float, error_rate: float, trials: int, seed: int) -> list[dict[str, Any]]:
    """One row per rule: the share of seed rollouts with a rollback, both variants healthy."""
    rng = np.random.default_rng(seed)
    plan = seed_plan()
    shipped = ErrorTests(plan, trials)
    fired = dict.fromkeys(RULES, np.zeros(trials, dtype=bool))
    carry = np.zeros((trials, 0, 2), dtype=np.int64)  # the previous rule's window across batches
    for share, shadowing, looks in _stage_looks():
        cand_rate = total_rps * LOOK_SECONDS * share
        base_rate = total_rps * LOOK_SECONDS * (1.0 if shadowing else 1.0 - share)
        for start in range(0, looks, CHUNK):
            size = min(CHUNK, looks - start)
            cand_n = rng.poisson(cand_rate, (trials, size))
            cand_x = rng.binomial(cand_n, error_rate)
            base_n = rng.poisson(base_rate, (trials, size)) if base_rate else np.zeros_like(cand_n)
            base_x = rng.binomial(base_n, error_rate)
            fired["shipped"] = fired["shipped"] | shipped.looks(cand_n, cand_x, base_n, base_x).any(axis=1)
            counts = np.concatenate([carry, np.stack([cand_n, cand_x], axis=-1)], axis=1)
            kept = carry.shape[1]
            n, x = counts[..., 0], counts[..., 1]
            p0 = plan.max_error_rate
            if not fired["previous"].all():  # once every rollout was rolled back, nothing changes
                previous = retired_rules.previous_errors(n, x, WINDOW_LOOKS, RECENT_LOOKS, p0)[:, kept:]
                fired["previous"] = fired["previous"] | previous.any(axis=1)
            if not fired["naive"].all():
                fired["naive"] = fired["naive"] | retired_rules.naive_errors(n, x, WINDOW_LOOKS, p0)[
                    :, kept:
                ].any(axis=1)
            carry = counts[:, -WINDOW_LOOKS:]
    return [
        {
            "rule": rule,
            "total_rps": total_rps,
            "true_error_rate": error_rate,
            "rollouts": trials,
            "share": round(float(fired[rule].mean()), 5),
        }
        for rule in RULES
    ]


def bucket_probabilities(scale: float, edges: np.ndarray = EDGES) -> np.ndarray:
    """P(TTFT in each bucket), +Inf last, for TTFT lognormal with the median scaled by `scale`."""
    cdf = norm.cdf((np.log(edges) - math.log(TTFT_MEDIAN * scale)) / TTFT_SIGMA)
    return np.diff(np.concatenate([[0.0], cdf, [1.0]]))


def _exceeds(scale: float) -> Callable[[float], float]:
    return lambda edge: float(norm.sf((math.log(edge) - math.log(TTFT_MEDIAN * scale)) / TTFT_SIGMA))


@overload
def _by_runs(function: Callable[..., np.ndarray], *arrays: np.ndarray) -> np.ndarray: ...
@overload
def _by_runs(function: Callable[..., list[np.ndarray]], *arrays: np.ndarray) -> list[np.ndarray]: ...
def _by_runs(function: Callable[..., Any], *arrays: np.ndarray) -> np.ndarray | list[np.ndarray]:
    """`function(*arrays)` over RUNS_PER_BLOCK runs (the leading axis) at a time, its arrays joined along
    that axis: the same result, since runs are independent, with temporaries of a few MB where hours of
    looks of every run at once make them of tens or hundreds, which cost more in page faults than in
    arithmetic (a late TTFT cell took 9 s, 6 of them in system time)."""
    parts = [function(*(a[start : start + RUNS_PER_BLOCK] for a in arrays))
             for start in range(0, len(arrays[0]), RUNS_PER_BLOCK)]  # fmt: skip
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return [np.concatenate(joined) for joined in zip(*parts, strict=True)]


def _buckets(rng: np.random.Generator, requests: np.ndarray, probabilities: list[np.ndarray]) -> np.ndarray:
    """(runs, looks) request counts -> (looks, runs, E+1) cumulative bucket counts, the total last: one
    multinomial draw per look, each look contiguous for the tests that take one look at a time."""
    buckets = np.empty((requests.shape[1], requests.shape[0], len(EDGES) + 1), dtype=np.int64)
    for j, p in enumerate(probabilities):
        buckets[j] = rng.multinomial(requests[:, j], p)
    return buckets.cumsum(axis=-1, out=buckets)


def _shipped_latency(tests: LatencyTests, cand: np.ndarray, base: np.ndarray) -> np.ndarray:
    """(runs, looks): which runs the shipped latency tests fire at each look. Only a run's first firing
    look is ever read, so once every run has fired the looks after it are left unsimulated (False)."""
    fires = np.zeros(cand.shape[1::-1], dtype=bool)
    fired = np.zeros(cand.shape[1], dtype=bool)
    for j in range(len(cand)):
        fires[:, j] = tests.look(cand[j], base[j])
        fired |= fires[:, j]
        if fired.all():
            break
    return fires


def detection(candidate_rps: float, name: str, late: bool, trials: int, seed: int) -> list[dict[str, Any]]:
    """One row per rule: detection times of `name` at `candidate_rps` on a 5 % stage."""
    rng = np.random.default_rng(seed)
    kind, size = REGRESSIONS[name]
    plan = seed_plan()
    base_rps = candidate_rps * (1 - STAGE_SHARE) / STAGE_SHARE
    onset = LATE_LOOKS if late else 0
    looks = onset + int(HORIZON[kind] / LOOK_SECONDS)
    cand_n = rng.poisson(candidate_rps * LOOK_SECONDS, (trials, looks))
    base_n = rng.poisson(base_rps * LOOK_SECONDS, (trials, looks))
    after = np.arange(looks) >= onset
    if kind == "error":
        cand_x = rng.binomial(cand_n, np.where(after, size, BASELINE_ERRORS))
        base_x = rng.binomial(base_n, BASELINE_ERRORS)
        shipped = _by_runs(
            lambda *counts: ErrorTests(plan, len(counts[0])).looks(*counts), cand_n, cand_x, base_n, base_x
        )
        previous = retired_rules.previous_errors(
            cand_n, cand_x, WINDOW_LOOKS, RECENT_LOOKS, plan.max_error_rate
        )
        naive = retired_rules.naive_errors(cand_n, cand_x, WINDOW_LOOKS, plan.max_error_rate)
        floor = error_floor(plan, candidate_rps, base_rps, size, BASELINE_ERRORS, late)
    else:
        healthy, slow = bucket_probabilities(1.0), bucket_probabilities(size)
        cand = _buckets(rng, cand_n, [slow if late_look else healthy for late_look in after])
        base = _buckets(rng, base_n, [healthy] * looks)
        shipped = _shipped_latency(LatencyTests(plan, trials, EDGES), cand, base)
        cand, base = cand.transpose(1, 0, 2), base.transpose(1, 0, 2)  # (runs, looks, E+1) views
        previous, naive = _by_runs(
            lambda c, b: retired_rules.latency(c, b, EDGES, WINDOW_LOOKS, (retired_rules.MIN_REQUESTS, 1)),
            cand, base,
        )  # fmt: skip
        floor = latency_floor(plan, candidate_rps, base_rps, EDGES, _exceeds(size), _exceeds(1.0), late)
    rows = []
    for rule, fires in (("shipped", shipped), ("previous", previous), ("naive", naive)):
        early = fires[:, :onset].any(axis=1)
        found = fires[:, onset:]
        detected = found.any(axis=1) & ~early
        delays = (found.argmax(axis=1)[detected] + 1) * LOOK_SECONDS
        rows.append(
            {
                "rule": rule, "candidate_rps": candidate_rps, "regression": name, "late": late,
                "median_s": float(np.median(delays)) if len(delays) else None,
                "p90_s": float(np.percentile(delays, 90)) if len(delays) else None,
                "detected_share": round(float(detected.sum() / max(1, (~early).sum())), 4),
                "false_before_onset": round(float(early.mean()), 4),
                "floor_s": round(floor, 1),
            }
        )  # fmt: skip
    return rows


def run_jobs(jobs: list[Job], workers: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run (function, arguments) jobs in `workers` processes: their false-rollback and detection rows."""
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(function, *arguments) for function, arguments in jobs]
        rows = [row for future in futures for row in future.result()]
    return [r for r in rows if "share" in r], [r for r in rows if "regression" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=200, help="simulated rollouts (and runs per detection cell)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="result file (default bench/results/decision_rules.json)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--regressions", nargs="+", choices=REGRESSIONS, default=list(REGRESSIONS),
        help="detection cells to run (each keeps the seed it has in a full run)",
    )  # fmt: skip
    parser.add_argument("--no-false-rollbacks", action="store_true", help="detection only")
    args = parser.parse_args()
    started = time.monotonic()
    jobs: list[Job] = [] if args.no_false_rollbacks else [
        (false_rollbacks, (rps, rate, args.trials, 1000 + i))
        for i, (rps, rate) in enumerate((r, e) for r in TOTAL_RPS for e in HEALTHY)
    ]  # fmt: skip
    jobs += [
        (detection, (rps, name, late, args.trials, 2000 + i))
        for i, (rps, name, late) in enumerate(
            (r, n, late) for r in CANDIDATE_RPS for n in REGRESSIONS for late in (False, True)
        )
        if name in args.regressions
    ]
    false, found = run_jobs(jobs, args.workers)
    for row in false:
        print(
            f"false rollbacks  {row['rule']:8} {row['total_rps']:>5} req/s at {row['true_error_rate']:.1%}: {row['share']:.2%}"
        )
    for row in found:
        if row["rule"] == "shipped":
            print(f"detection {row['regression']:9} {row['candidate_rps']:>3} req/s late={row['late']!s:5} "
                  f"median {row['median_s']} s (floor {row['floor_s']} s), detected {row['detected_share']:.0%}")  # fmt: skip
    plan = seed_plan()
    params = {
        "look_seconds": LOOK_SECONDS, "trials": args.trials, "regressions": args.regressions,
        "false_rollbacks": not args.no_false_rollbacks, "seed_stages": SEED_STAGES,
        "alpha_per_test": plan.alpha, "tests": list(plan.tests), "log_bound": plan.log_bound,
        "log_detector_bound": plan.log_detector_bound, "stage_share": STAGE_SHARE,
        "baseline_error_rate": BASELINE_ERRORS, "ttft": {"median_s": TTFT_MEDIAN, "sigma": TTFT_SIGMA},
        "horizon_s": HORIZON, "late_s": LATE_LOOKS * LOOK_SECONDS,
        "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_result("decision_rules", params, {"false_rollbacks": false, "detection": found}, args.out)


if __name__ == "__main__":
    main()
