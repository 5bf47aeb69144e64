"""Cohorts and the latency tests: each request as an observation against each client once per stage.

bench/client_rules.py's population (heavy-tailed activity, CLIENTS_PER_RPS clients per req/s), each client
also `slowness` times slower than the median client on either variant (lognormal, log-sd SLOWNESS: a
user on a slow network, a user whose prompts run long): its TTFT is that factor times a draw from
bench.decision_rules' TTFT (lognormal, median 0.4 s, sigma 0.6). Both variants healthy (equally fast)
unless a regression makes the candidate's every answer `slowdown` times slower.

A 5 % stage, a look every 5 s, both latency tests the controller runs on the answers' exact times with
the seed plan's levels: ttft_vs_baseline (ExactShiftTest's kernels through bench/exact_rules.ExactTests,
with its change detector) at max_latency_ratio 1.2, and the TTFT SLO (more than 5 % above 2 s, E1).
  per_request  each look's answers: Poisson at each side's rate, each from a client drawn by its share
               of the side's requests
  clients      each client's first answer in the stage (client_units.py), at an exponential time at
               its own rate

false_rollbacks: the share of runs some look fires within `hours` of the stage, healthy candidate.
detection: the candidate `slowdown` times slower from the stage's start: seconds to the first firing look.

    python -m bench.client_latency [--trials N] [--hours H] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.client_rules import CLIENTS_PER_RPS, TOTAL_RPS, population
from bench.decision_rules import STAGE_SHARE, TTFT_MEDIAN, TTFT_SIGMA, Job, run_jobs
from bench.exact_rules import ExactTests
from bench.shipped_rules import LOOK_SECONDS, max_latency_ratio, max_ttft_p95, seed_plan
from gateway.rollout.sequential import ThresholdTest, mixture, pooled_ranks, threshold_look

SLOWNESS = 0.5
SLO_SHARE = 0.05
SLOWDOWNS = (1.5, 2.0)


class Side:
    """One side's clients in one run: draws answers by share of requests, or first answers once."""

    def __init__(self, rng: np.random.Generator, rate: np.ndarray, slowness: np.ndarray) -> None:
        self.rng, self.rate, self.slowness = rng, rate, slowness
        self.total = rate.sum()
        self.cumulative = np.cumsum(rate) / self.total if self.total else rate

    def ttft(self, clients: np.ndarray, slowdown: float) -> np.ndarray:
        draws = self.rng.lognormal(np.log(TTFT_MEDIAN), TTFT_SIGMA, len(clients))
        return draws * self.slowness[clients] * slowdown

    def requests(self, count: int, slowdown: float = 1.0) -> np.ndarray:
        clients = np.searchsorted(self.cumulative, self.rng.random(count), side="right")
        return self.ttft(np.minimum(clients, len(self.rate) - 1), slowdown)

    def first_answers(self, looks: int, slowdown: float = 1.0) -> list[np.ndarray]:
        """Per look, the TTFT of the clients whose first answer came in it."""
        serving = np.flatnonzero(self.rate > 0)
        seconds = self.rng.exponential(1.0 / self.rate[serving])
        kept = serving[seconds < looks * LOOK_SECONDS]
        at = (seconds[seconds < looks * LOOK_SECONDS] // LOOK_SECONDS).astype(np.int64)
        values = self.ttft(kept, slowdown)
        order = np.argsort(at, kind="stable")
        bounds = np.searchsorted(at[order], np.arange(looks + 1))
        return [values[order[bounds[i] : bounds[i + 1]]] for i in range(looks)]


class LatencyRuns:
    """The shift test with its detector and the SLO test over many runs: which runs fired."""

    def __init__(self, runs: int) -> None:
        self.plan = seed_plan()
        self.shift = ExactTests(self.plan, runs)
        self.slo = np.asarray(ThresholdTest.new(SLO_SHARE).alternatives)
        self.slo_lr = np.zeros((runs, len(self.slo)))
        self.slo_sr = np.zeros((runs, len(self.slo)))
        self.runs = runs

    def look(self, candidate: list[np.ndarray], baseline: list[np.ndarray]) -> np.ndarray:
        """One look's values per run; returns which runs' tests fire at it."""
        width = max(1, max(len(c) for c in candidate))
        ranks = np.zeros((self.runs, width))
        pooled = np.zeros(self.runs, dtype=np.int64)
        for run, (ours, theirs) in enumerate(zip(candidate, baseline, strict=True)):
            if len(ours) and len(theirs):
                ranks[run, : len(ours)] = pooled_ranks(ours, theirs, max_latency_ratio(self.plan) - 1)
                pooled[run] = len(ours) + len(theirs)
        shifted = self.shift.look(ranks, pooled)
        total = np.array([len(c) for c in candidate])
        slow = np.array([(c > max_ttft_p95(self.plan)).sum() for c in candidate])
        self.slo_lr, self.slo_sr = threshold_look(
            SLO_SHARE, self.slo, self.slo_lr, self.slo_sr, np.ones(self.runs, dtype=bool), total, slow
        )
        return shifted | (mixture(self.slo_lr) >= self.plan.log_bound)


def _fired(total_rps: float, trials: int, looks: int, slowdown: float, seed: int) -> dict[str, np.ndarray]:
    """Per counting, per run, the first look (1-based) some latency test fired at, 0 where none did."""
    rng = np.random.default_rng(seed)
    people = population(rng, trials, total_rps)
    slowness = rng.lognormal(0.0, SLOWNESS, people.rate.shape)
    cand = people.position < STAGE_SHARE
    sides = [
        (Side(rng, np.where(cand[r], people.rate[r], 0), slowness[r]),
         Side(rng, np.where(cand[r], 0, people.rate[r]), slowness[r]))
        for r in range(trials)
    ]  # fmt: skip
    first = {}
    runs = LatencyRuns(trials)
    firsts = [(c.first_answers(looks, slowdown), b.first_answers(looks)) for c, b in sides]
    found = np.zeros(trials, dtype=np.int64)
    for i in range(looks):
        if not any(len(c[i]) for c, _ in firsts):
            continue
        fires = runs.look([c[i] for c, _ in firsts], [b[i] for _, b in firsts])
        found = np.where((found == 0) & fires, i + 1, found)
    first["clients"] = found
    runs = LatencyRuns(trials)
    found = np.zeros(trials, dtype=np.int64)
    for i in range(looks):
        counts = [
            (rng.poisson(c.total * LOOK_SECONDS), rng.poisson(b.total * LOOK_SECONDS)) for c, b in sides
        ]
        fires = runs.look(
            [c.requests(n, slowdown) for (c, _), (n, _) in zip(sides, counts, strict=True)],
            [b.requests(n) for (_, b), (_, n) in zip(sides, counts, strict=True)],
        )
        found = np.where((found == 0) & fires, i + 1, found)
    first["per_request"] = found
    return first


def false_rollbacks(total_rps: float, trials: int, hours: float, seed: int) -> list[dict[str, Any]]:
    """One row per counting: the share of healthy runs some latency test fired on within `hours`."""
    fired = _fired(total_rps, trials, int(hours * 3600 / LOOK_SECONDS), 1.0, seed)
    return [
        {"counting": counting, "total_rps": total_rps, "clients": int(total_rps * CLIENTS_PER_RPS),
         "hours": hours, "runs": trials, "share": round(float((first > 0).mean()), 5)}
        for counting, first in fired.items()
    ]  # fmt: skip


def detection(total_rps: float, slowdown: float, trials: int, seed: int) -> list[dict[str, Any]]:
    """One row per counting: seconds to the first firing look with the candidate `slowdown` slower."""
    fired = _fired(total_rps, trials, int(3600 / LOOK_SECONDS), slowdown, seed)
    rows = []
    for counting, first in fired.items():
        delays = first[first > 0] * LOOK_SECONDS
        rows.append(
            {"counting": counting, "total_rps": total_rps, "regression": f"ttft_x{slowdown:g}",
             "median_s": float(np.median(delays)) if len(delays) else None,
             "p90_s": float(np.percentile(delays, 90)) if len(delays) else None,
             "detected_share": round(float((first > 0).mean()), 4)}
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="runs per cell")
    parser.add_argument("--hours", type=float, default=12.0, help="the healthy stage's length simulated")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/client_latency.json")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    jobs: list[Job] = [
        (false_rollbacks, (rps, args.trials, args.hours, 5000 + i)) for i, rps in enumerate(TOTAL_RPS)
    ]
    jobs += [
        (detection, (rps, slowdown, args.trials, 6000 + i))
        for i, (rps, slowdown) in enumerate((r, s) for r in TOTAL_RPS for s in SLOWDOWNS)
    ]
    false, found = run_jobs(jobs, args.workers)
    for row in false:
        print(
            f"false rollbacks {row['counting']:12} {row['total_rps']:>3} req/s, {row['hours']} h: {row['share']:.2%}"
        )
    for row in found:
        print(f"detection {row['counting']:12} {row['regression']} {row['total_rps']:>3} req/s: "
              f"median {row['median_s']} s, detected {row['detected_share']:.0%}")  # fmt: skip
    plan = seed_plan()
    params = {
        "look_seconds": LOOK_SECONDS, "trials": args.trials, "hours": args.hours, "slowness": SLOWNESS,
        "ttft": {"median_s": TTFT_MEDIAN, "sigma": TTFT_SIGMA}, "stage_share": STAGE_SHARE,
        "max_latency_ratio": max_latency_ratio(plan), "max_ttft_p95": max_ttft_p95(plan),
        "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_result("client_latency", params, {"false_rollbacks": false, "detection": found}, args.out)


if __name__ == "__main__":
    main()
