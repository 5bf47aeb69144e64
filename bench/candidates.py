"""Several candidates in one rollout (issue 38 item 2): false rollbacks over a week, the time to roll back
a bad candidate, and the budget each lane gets, simulated through the shipped error checks.

The spec is the seed's (bench/shipped_rules.seed_spec: the spec's defaults, a look every 5 s) with
k = 1, 2 or 3 candidates (`tune-a`, `tune-b`, `tune-c`) beside `baseline`, `retries.fallback: baseline`,
and one step at SHARE % for each candidate. Each candidate's lane runs `plan_for(lane_spec(spec, c))`
(gateway/rollout/candidates.py: its share of `false_rollback_budget` is budget / k, its detectors'
mean time between false alarms k times the stated one) through bench/shipped_rules.ErrorTests: the
kernels and the blame rule the controller runs, every run of a block at once, looks in chunks.

Traffic: TOTAL_RPS requests a second in all, Poisson per look; each candidate gets SHARE %, the baseline
the rest. Every lane compares its candidate with the SAME baseline counts, as the lanes do in production
(the baseline's bad luck is in every comparison at once). Errors are binomial; every request is counted
once (no retries: at 0.1 % errors they would change the counts by about a thousandth).

1. week: every candidate healthy (HEALTHY errors, the baseline's rate) for 7 days of looks. A run is a
   false rollback when any lane rolls its candidate back; a block with one is simulated again on the
   same draws with the change detectors off (`log_detector_bound` infinite), which tells the
   e-value tests' false rollbacks from those only a detector made.
2. detection: `tune-a` fails at HEALTHY plus 1 % or 5 % from the first look, the others stay healthy
   (and with k = 3, `tune-a` and `tune-b` both fail: each must be caught); seconds to its rollback (each
   one's), and how many healthy candidates were rolled back over the same looks
   (shares kept as they were; in production the rolled back one's share goes to the baseline). On the
   same draws, every lane at one candidate's plan: what the baseline's smaller share (100 - k SHARE %)
   costs, apart from the smaller alpha.
3. budget: each lane's `false_rollback_budget`, `plan.alpha`, `plan.tests` and detector horizon.

    python -m bench.candidates [--runs N] [--out PATH]

The default 1,000 weeks per k take about 8 minutes in two worker processes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta

from bench._common import write_result
from bench.shipped_rules import LOOK_SECONDS, ErrorTests, seed_spec
from gateway.rollout.candidates import lane_spec
from gateway.rollout.plan import Plan, plan_for
from gateway.spec.model import RolloutSpec, validate_spec

CANDIDATES = ("tune-a", "tune-b", "tune-c")
COUNTS = (1, 2, 3)
SHARE = 20  # each candidate's share, %
TOTAL_RPS = 20.0
HEALTHY = 0.001
WEEK_LOOKS = int(7 * 86400 / LOOK_SECONDS)  # 120,960
REGRESSIONS = (0.01, 0.05)  # added to HEALTHY on the bad candidate
DETECT_RUNS = 1000
DETECT_LOOKS = int(2 * 3600 / LOOK_SECONDS)  # the horizon for a bad candidate's rollback
BLOCK = 50  # runs simulated together
CHUNK = 2160  # looks simulated together (3 h)


def rollout_spec(k: int) -> RolloutSpec:
    """The seed's spec with `k` candidates beside the baseline, each one step at SHARE %."""
    names = CANDIDATES[:k]
    variants = {"baseline": {"endpoints": ["127.0.0.1:8001"]}}
    variants |= {name: {"endpoints": [f"127.0.0.1:{8002 + i}"]} for i, name in enumerate(names)}
    return validate_spec(
        seed_spec(
            name="tune",
            variants=variants,
            routing={"weights": {"baseline": 100}},
            strategy={"steps": [{"weight": SHARE}]},
        )
    )


def lane_plans(k: int, detectors: bool = True) -> list[Plan]:
    """Each candidate's lane's plan (`detectors` False: the change detectors never fire)."""
    spec = rollout_spec(k)
    plans = [plan_for(lane_spec(spec, candidate)) for candidate in spec.candidates]
    return plans if detectors else [dataclasses.replace(p, log_detector_bound=math.inf) for p in plans]


def budget(k: int) -> dict[str, Any]:
    """What one lane of `k` gets (every lane gets the same)."""
    spec = rollout_spec(k)
    lane = lane_spec(spec, spec.candidates[0])
    plan = plan_for(lane)
    return {
        "false_rollback_budget": lane.analysis.false_rollback_budget,
        "alpha": plan.alpha,
        "tests": list(plan.tests),
        "log_bound": round(plan.log_bound, 3),
        "mean_time_between_false_alarms_days": lane.analysis.mean_time_between_false_alarms / 86400,
        "log_detector_bound": round(plan.log_detector_bound, 3),
    }


def rollbacks(plans: list[Plan], rates: tuple[float, ...], runs: int, looks: int, seed: list[int],
              until: int = 0) -> np.ndarray:  # fmt: skip
    """(runs, k): the look at which each of k lanes (`plans`) rolls its candidate back (-1: not within
    `looks`), the candidates' error rates `rates`. `until`: stop once every run's first `until` lanes have."""
    rng = np.random.default_rng(seed)
    k = len(plans)
    lanes = [ErrorTests(plan, runs) for plan in plans]
    at = np.full((runs, k), -1)
    per_look = TOTAL_RPS * LOOK_SECONDS / 100
    for start in range(0, looks, CHUNK):
        size = min(CHUNK, looks - start)
        base_n = rng.poisson(per_look * (100 - SHARE * k), (runs, size))
        base_x = rng.binomial(base_n, HEALTHY)
        for lane, (tests, rate) in enumerate(zip(lanes, rates, strict=True)):
            cand_n = rng.poisson(per_look * SHARE, (runs, size))
            back = tests.looks(cand_n, rng.binomial(cand_n, rate), base_n, base_x)
            new = back.any(axis=1) & (at[:, lane] < 0)
            at[new, lane] = start + back.argmax(axis=1)[new]
        if until and (at[:, :until] >= 0).all():
            break
    return at


def week_block(k: int, block: int, runs: int) -> tuple[int, int]:
    """One block of healthy weeks: (runs with a false rollback, of them those the e-value tests alone
    make, on the same draws)."""
    rates, seed = (HEALTHY,) * k, [k, block]
    rolled = (rollbacks(lane_plans(k), rates, runs, WEEK_LOOKS, seed) >= 0).any(axis=1)
    if not rolled.any():
        return 0, 0
    alone = (rollbacks(lane_plans(k, detectors=False), rates, runs, WEEK_LOOKS, seed) >= 0).any(axis=1)
    return int(rolled.sum()), int((rolled & alone).sum())


def interval(hits: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95 % interval for a binomial share `hits` of `n`."""
    low = float(beta.ppf(0.025, hits, n - hits + 1)) if hits else 0.0
    high = float(beta.ppf(0.975, hits + 1, n - hits)) if hits < n else 1.0
    return low, high


def detection(k: int, regression: float, runs: int, bad: int = 1) -> dict[str, Any]:
    """The first `bad` candidates bad from the first look: seconds to each one's rollback, healthy
    candidates rolled back; and on the same draws with every lane at one candidate's plan (its budget,
    k's traffic): what the smaller baseline share costs apart from the smaller alpha."""
    rates = (HEALTHY + regression,) * bad + (HEALTHY,) * (k - bad)
    seed = [k, round(regression * 1000), 1_000_000 * bad]

    def looks(plans: list[Plan]) -> np.ndarray:
        return np.concatenate([
            rollbacks(plans, rates, min(BLOCK, runs - start), DETECT_LOOKS, [*seed, start], until=bad)
            for start in range(0, runs, BLOCK)
        ])  # fmt: skip

    at, alone = looks(lane_plans(k)), looks(lane_plans(1) * k)
    caught = (at[:, :bad] >= 0).all(axis=1)
    seconds = (at[:, :bad][at[:, :bad] >= 0] + 1) * LOOK_SECONDS
    at_one = (alone[alone[:, 0] >= 0, 0] + 1) * LOOK_SECONDS
    return {
        "bad_candidates": bad,
        "seconds_p50": float(np.median(seconds)),
        "seconds_p90": float(np.quantile(seconds, 0.9)),
        "not_caught_within_horizon": int((~caught).sum()),  # runs where a bad one was not
        "healthy_rolled_back": int((at[:, bad:] >= 0).sum()),
        "healthy_lanes": runs * (k - bad),
        "at_one_candidates_budget": {"p50": float(np.median(at_one)), "p90": float(np.quantile(at_one, 0.9))},
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000, help="healthy weeks per k")
    parser.add_argument("--detect-runs", type=int, default=DETECT_RUNS, help="runs per detection cell")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {}
    workers = min(2, len(os.sched_getaffinity(0)))
    with ProcessPoolExecutor(workers) as pool:
        blocks = {
            k: [pool.submit(week_block, k, b, min(BLOCK, args.runs - s)) for b, s in enumerate(range(0, args.runs, BLOCK))]
            for k in COUNTS
        }  # fmt: skip
        cells = {(k, r): pool.submit(detection, k, r, args.detect_runs) for k in COUNTS for r in REGRESSIONS}
        two_bad = {r: pool.submit(detection, 3, r, args.detect_runs, 2) for r in REGRESSIONS}
        for k in COUNTS:
            found = [future.result() for future in blocks[k]]
            rolled, alone = sum(f[0] for f in found), sum(f[1] for f in found)
            low, high = interval(rolled, args.runs)
            results[f"k={k}"] = {
                "budget": budget(k),
                "week": {
                    "runs": args.runs,
                    "any_candidate_rolled_back": rolled,
                    "share": rolled / args.runs,
                    "share_95": [round(low, 5), round(high, 5)],
                    "by_e_value_tests_alone": alone,
                    "only_with_a_detector": rolled - alone,
                },
                "detection": {
                    f"+{r:.0%} errors": cells[k, r].result() for r in REGRESSIONS
                },
            }  # fmt: skip
            print(f"k={k}", results[f"k={k}"], flush=True)
        # two of three candidates bad: each one caught, the good one left alone
        results["k=3, two bad"] = {f"+{r:.0%} errors": two_bad[r].result() for r in REGRESSIONS}
    parameters = {
        "candidates": list(CANDIDATES),
        "share": SHARE,
        "total_rps": TOTAL_RPS,
        "healthy_error_rate": HEALTHY,
        "look_seconds": LOOK_SECONDS,
        "week_looks": WEEK_LOOKS,
        "regressions": REGRESSIONS,
        "detect_horizon_seconds": DETECT_LOOKS * LOOK_SECONDS,
        "runs": args.runs,
        "detect_runs": args.detect_runs,
        "workers": workers,
    }
    path = write_result("candidates", parameters, results, args.out)
    print(f"{path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
