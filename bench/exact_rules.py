"""TTFT judged on exact per-request values against the histogram shift test: detection and false rollbacks.

Issue 26: with the gateway measuring every request, `ttft_vs_baseline` can rank each request's own TTFT
(ExactShiftTest, gateway/rollout/sequential/exact.py) instead of counting bucket exceedances (ShiftTest).
The rules, each looking every 5 s at the seed plan's levels (the e-value's log bound 6.21, alpha 0.2 %;
the change detector's 15.36) and firing on either, as the controller runs them:
  exact      ExactShiftTest on each request's TTFT
  graystack  ShiftTest on the model servers' TTFT buckets (1.2 apart: inference/server/telemetry.py)
  vllm       ShiftTest on vLLM's TTFT buckets (vllm/v1/metrics/loggers.py: up to 2.5x apart)
Traffic as in bench.decision_rules: a 5 % stage (the baseline at 19x the candidate's rate), Poisson
requests per look, one stratum, TTFT lognormal (median 0.4 s, sigma 0.6), the candidate `slowdown`
times slower from the start, judged at a tolerated `max_latency_ratio` (the spec's; 1.2 by default).

detection: seconds to the first firing look (median, p90) over an hour, and the share of runs that fired.
false_rollbacks: the share of runs that fire within `hours` with the candidate as fast as the baseline
  (slowdown 1.0), or exactly max_latency_ratio slower: the null's boundary, where the budget is spent.

    python -m bench.exact_rules [--trials N] [--hours H] [--rules exact graystack vllm] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import ndtr

from bench._common import write_result
from bench.decision_rules import EDGES, STAGE_SHARE, TTFT_MEDIAN, TTFT_SIGMA, bucket_probabilities
from bench.shipped_rules import LOOK_SECONDS, ShiftTests, max_latency_ratio, seed_plan, seed_spec
from gateway.rollout.plan import Plan, plan_for
from gateway.rollout.sequential import ExactShiftTest, mixture, rank_increments, shiryaev_roberts_step
from gateway.spec.model import validate_spec

VLLM_TTFT_BUCKETS = np.asarray(
    (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
     80.0, 160.0, 640.0, 2560.0)
)  # fmt: skip
LAYOUTS = {"graystack": EDGES, "vllm": VLLM_TTFT_BUCKETS}
RULES = ("exact", *LAYOUTS)
CANDIDATE_RPS = (1, 4, 16)
SLOWDOWNS = ((1.5, 1.2), (1.3, 1.2), (1.3, 1.1), (1.2, 1.1))  # (slowdown, max_latency_ratio)
NULLS = ((1.0, 1.2), (1.2, 1.2))
DETECTION_SECONDS = 3600


def candidate_ranks(
    rng: np.random.Generator, cand_n: np.ndarray, base_n: np.ndarray, shift: float
) -> tuple[np.ndarray, np.ndarray]:
    """One look's pooled ranks of candidate / (1+m) among the baseline's values (runs, C), 0 past a
    run's candidates, and the pooled counts (runs,).

    On the baseline's CDF scale its values are uniform and the scaled candidate's are Phi(Z + shift),
    shift = log(slowdown / max_latency_ratio) / sigma for lognormal TTFT, so the baseline values between
    consecutive candidates are multinomial over the gaps: no baseline value is drawn (304 a second at
    16 req/s to the candidate). The same ranks in law as `pooled_ranks` on drawn values (tested).
    """
    width = max(int(cand_n.max()), 1)
    present = np.arange(width) < cand_n[:, None]
    points = np.sort(np.where(present, ndtr(rng.standard_normal((len(cand_n), width)) + shift), 1.0), axis=1)
    gaps = np.clip(np.diff(points, prepend=0.0, append=1.0, axis=1), 0.0, None)
    below = rng.multinomial(base_n, gaps / gaps.sum(axis=1, keepdims=True)).cumsum(axis=1)[:, :width]
    return np.where(present, below + np.arange(1, width + 1), 0), cand_n + base_n


@dataclass
class ExactTests:
    """ExactShiftTest and its change detector over many runs, through the kernels the state calls."""

    plan: Plan
    runs: int

    def __post_init__(self) -> None:
        test = ExactShiftTest.new(self.ratio() - 1)
        self.bets, self.levels = np.asarray(test.alternatives), np.asarray(test.levels)
        self.log_lr = np.zeros((self.runs, len(test.log_lr)))
        self.log_sr = np.zeros((self.runs, len(test.log_sr)))
        self.started = np.zeros(self.runs, dtype=bool)

    def ratio(self) -> float:
        return max_latency_ratio(self.plan)

    def look(self, ranks: np.ndarray, pooled: np.ndarray) -> np.ndarray:
        """One look's ranks (runs, C) and pooled counts (runs,); returns which runs' tests fire."""
        inc = rank_increments(self.bets, self.levels, ranks[:, None, :], pooled[:, None])
        inc = inc.reshape(self.runs, -1)
        candidates = (ranks > 0).sum(axis=1)
        compared = (candidates > 0) & (pooled > candidates)
        self.log_lr = self.log_lr + inc
        self.log_sr = shiryaev_roberts_step(self.log_sr, self.started, compared, inc)
        self.started |= compared
        changed = self.started & (mixture(self.log_sr) >= self.plan.log_detector_bound)
        return (mixture(self.log_lr) >= self.plan.log_bound) | changed


def _looks(
    rule: str, plan: Plan, slowdown: float, trials: int, rng: np.random.Generator
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`rule`'s look: one look's request counts (runs,) per variant -> which runs' tests fire."""
    if rule == "exact":
        exact = ExactTests(plan, trials)
        shift = math.log(slowdown / exact.ratio()) / TTFT_SIGMA
        return lambda cand_n, base_n: exact.look(*candidate_ranks(rng, cand_n, base_n, shift))
    edges = LAYOUTS[rule]
    shifts = ShiftTests(plan, trials, edges)
    slow, healthy = bucket_probabilities(slowdown, edges), bucket_probabilities(1.0, edges)
    return lambda cand_n, base_n: shifts.look(
        rng.multinomial(cand_n, slow).cumsum(axis=-1), rng.multinomial(base_n, healthy).cumsum(axis=-1)
    )


def first_fires(
    rule: str, candidate_rps: float, slowdown: float, max_ratio: float, looks: int, trials: int, seed: int
) -> np.ndarray:
    """Per run, the first look (1-based) at which `rule` fires, 0 where it did not within `looks`."""
    rng = np.random.default_rng(seed)
    plan = plan_for(validate_spec(seed_spec(analysis={"max_latency_ratio": max_ratio})))
    look = _looks(rule, plan, slowdown, trials, rng)
    base_rps = candidate_rps * (1 - STAGE_SHARE) / STAGE_SHARE
    first = np.zeros(trials, dtype=np.int64)
    for j in range(1, looks + 1):
        fires = look(
            rng.poisson(candidate_rps * LOOK_SECONDS, trials), rng.poisson(base_rps * LOOK_SECONDS, trials)
        )
        first = np.where((first == 0) & fires, j, first)
        if first.all():
            break
    return first


def detection(trials: int, rules: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    looks = int(DETECTION_SECONDS / LOOK_SECONDS)
    for i, ((slowdown, ratio), rps, rule) in enumerate(
        (s, r, rule) for s in SLOWDOWNS for r in CANDIDATE_RPS for rule in RULES
    ):
        if rule not in rules:
            continue
        first = first_fires(rule, rps, slowdown, ratio, looks, trials, seed=3000 + i)
        delays = first[first > 0] * LOOK_SECONDS
        rows.append(
            {
                "rule": rule, "candidate_rps": rps, "slowdown": slowdown, "max_latency_ratio": ratio,
                "median_s": float(np.median(delays)) if len(delays) else None,
                "p90_s": round(float(np.percentile(delays, 90)), 1) if len(delays) else None,
                "detected_share": round(float(np.mean(first > 0)), 4),
            }
        )  # fmt: skip
        print(f"detection {rule:9} {rps:>2} req/s x{slowdown} (tolerated {ratio}): median {rows[-1]['median_s']} s, "
              f"detected {rows[-1]['detected_share']:.0%}", flush=True)  # fmt: skip
    return rows


def false_rollbacks(trials: int, hours: float, rules: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    looks = int(hours * 3600 / LOOK_SECONDS)
    for i, ((slowdown, ratio), rps, rule) in enumerate(
        (s, r, rule) for s in NULLS for r in CANDIDATE_RPS for rule in RULES
    ):
        if rule not in rules:
            continue
        first = first_fires(rule, rps, slowdown, ratio, looks, trials, seed=4000 + i)
        rows.append(
            {
                "rule": rule, "candidate_rps": rps, "slowdown": slowdown, "max_latency_ratio": ratio,
                "hours": hours, "runs": trials, "share": round(float(np.mean(first > 0)), 5),
            }
        )  # fmt: skip
        print(f"false rollbacks {rule:9} {rps:>2} req/s x{slowdown}: {rows[-1]['share']:.2%}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="simulated runs per cell")
    parser.add_argument("--hours", type=float, default=6.0, help="the null runs' horizon")
    parser.add_argument(
        "--rules", nargs="+", choices=RULES, default=list(RULES), help="the rules to simulate"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="result file (default bench/results/exact_rules.json)"
    )
    args = parser.parse_args()
    started = time.monotonic()
    rules = tuple(args.rules)
    results = {
        "detection": detection(args.trials, rules),
        "false_rollbacks": false_rollbacks(args.trials, args.hours, rules),
    }
    plan = seed_plan()
    params = {
        "rules": list(rules), "look_seconds": LOOK_SECONDS, "trials": args.trials, "null_hours": args.hours,
        "detection_seconds": DETECTION_SECONDS, "stage_share": STAGE_SHARE, "alpha": plan.alpha,
        "log_bound": plan.log_bound, "log_detector_bound": plan.log_detector_bound,
        "ttft": {"median_s": TTFT_MEDIAN, "sigma": TTFT_SIGMA}, "vllm_edges": VLLM_TTFT_BUCKETS.tolist(),
        "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_result("exact_rules", params, results, args.out)


if __name__ == "__main__":
    main()
