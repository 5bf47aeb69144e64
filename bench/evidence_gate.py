"""The `approval: evidence` gate (issue 29): how soon it approves a healthy candidate by itself, and
how often it approves a slower one, simulated through the shipped kernels.

The gate (gateway/rollout/not_worse.py) approves once three parts are shown at the same look, each at
the plan's alpha: TTFT and inter-token latency not more than (1 + max_slowdown) x the baseline's
(NotSlowerTest's kernel, `rank_increments`, on the ranks counted from the slow end, as `faster_ranks`
gives them: the ascending ranks of bench.exact_rules.candidate_ranks mirrored, N + 1 - R), and the
error rate below max_error_rate (`below_log_evalue`). Traffic: a 20 % stage (the baseline at 4x the
candidate's rate: the gate stands before 100 %), Poisson requests per look, one look every 5 s, TTFT and
each request's mean token gap lognormal with sigma 0.6 (bench.decision_rules), the candidate's
errors binomial at HEALTHY_ERRORS. The plan: the seed spec's defaults (budget 1 %) with an evidence gate
at the default margin (max_slowdown 0.1), so alpha is the budget over its six tests.

healthy: the candidate as fast as the baseline; seconds until approved (median, p90) and the share
  approved within the horizon, and when each part alone was first shown (medians).
slower: the candidate's TTFT 1.2x and 1.5x the baseline's (its token gaps and errors healthy); the
  share of runs approved within the horizon (the gate's false approvals: at most alpha, for ever).

    python -m bench.evidence_gate [--trials N] [--hours H] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.decision_rules import TTFT_SIGMA
from bench.exact_rules import CANDIDATE_RPS, candidate_ranks
from bench.shipped_rules import LOOK_SECONDS, seed_spec
from gateway.rollout.not_worse import below_log_evalue
from gateway.rollout.plan import Plan, plan_for
from gateway.rollout.sequential import NotSlowerTest, mixture, rank_increments
from gateway.spec.model import validate_spec

STAGE_SHARE = 0.2
HEALTHY_ERRORS = 0.001  # a third of the default max_error_rate (0.3 %)
SLOWDOWNS = (1.0, 1.2, 1.5)
PARTS = ("ttft", "itl", "errors")


def gate_plan() -> Plan:
    """The seed spec's plan with `approval: evidence` before 100 %."""
    steps = [{"weight": 5}, {"weight": 20}, {"weight": 100, "approval": "evidence"}]
    return plan_for(validate_spec(seed_spec(strategy={"steps": steps})))


class Latency:
    """One latency part over many runs: NotSlowerTest's state, updated by its kernel."""

    def __init__(self, runs: int, margin: float, slowdown: float) -> None:
        test = NotSlowerTest.new(margin)
        self.bets, self.levels = np.asarray(test.alternatives), np.asarray(test.levels)
        self.log_lr = np.zeros((runs, len(test.log_lr)))
        self.shift = math.log(slowdown / (1 + margin)) / TTFT_SIGMA  # on the baseline's CDF scale

    def look(self, rng: np.random.Generator, cand_n: np.ndarray, base_n: np.ndarray) -> np.ndarray:
        """One look's answers; returns the runs whose log e-value is at its bound's side (the log e-value)."""
        ranks, pooled = candidate_ranks(rng, cand_n, base_n, self.shift)
        faster = np.where(ranks > 0, pooled[:, None] + 1 - ranks, 0)  # counted from the slow end
        inc = rank_increments(self.bets, self.levels, faster[:, None, :], pooled[:, None])
        self.log_lr = self.log_lr + inc.reshape(len(cand_n), -1)
        return mixture(self.log_lr)


def first_shown(plan: Plan, rps: float, slowdown: float, looks: int, trials: int, seed: int) -> np.ndarray:
    """Per run and part (runs, 4: ttft, itl, errors, all three at one look), the first look (1-based)
    at which it was shown; 0 where it was not within `looks`."""
    margin = plan.not_worse
    if margin is None or margin.max_error_rate is None:
        raise ValueError("the plan has no evidence gate")
    rng = np.random.default_rng(seed)
    ttft, itl = Latency(trials, margin.max_slowdown, slowdown), Latency(trials, margin.max_slowdown, 1.0)
    requests, events = np.zeros(trials), np.zeros(trials)
    first = np.zeros((trials, 4), dtype=np.int64)
    base_rps = rps * (1 - STAGE_SHARE) / STAGE_SHARE
    for j in range(1, looks + 1):
        cand_n = rng.poisson(rps * LOOK_SECONDS, trials)
        base_n = rng.poisson(base_rps * LOOK_SECONDS, trials)
        requests += cand_n
        events += rng.binomial(cand_n, HEALTHY_ERRORS)
        shown = np.stack(
            [
                ttft.look(rng, cand_n, base_n) >= plan.log_bound,
                itl.look(rng, cand_n, base_n) >= plan.log_bound,
                below_log_evalue(events, requests, margin.max_error_rate) >= plan.log_bound,
            ],
            axis=1,
        )
        shown = np.concatenate([shown, shown.all(axis=1, keepdims=True)], axis=1)
        first = np.where((first == 0) & shown, j, first)
        if first[:, 3].all():
            break
    return first


def _median(first: np.ndarray) -> float | None:
    return float(np.median(first[first > 0])) * LOOK_SECONDS if (first > 0).any() else None


def cells(trials: int, hours: float) -> list[dict[str, Any]]:
    plan, rows = gate_plan(), []
    looks = int(hours * 3600 / LOOK_SECONDS)
    for i, (slowdown, rps) in enumerate((s, r) for s in SLOWDOWNS for r in CANDIDATE_RPS):
        first = first_shown(plan, rps, slowdown, looks, trials, seed=2900 + i)
        approved = first[:, 3]
        delays = approved[approved > 0] * LOOK_SECONDS
        rows.append(
            {
                "slowdown": slowdown, "candidate_rps": rps, "hours": hours, "runs": trials,
                "approved_share": round(float(np.mean(approved > 0)), 4),
                "median_s": float(np.median(delays)) if len(delays) else None,
                "p90_s": round(float(np.percentile(delays, 90)), 1) if len(delays) else None,
                **{f"{part}_shown_median_s": _median(first[:, k]) for k, part in enumerate(PARTS)},
            }
        )  # fmt: skip
        row = rows[-1]
        print(f"x{slowdown} {rps:>2} req/s: approved {row['approved_share']:.1%}, median {row['median_s']} s "
              f"(ttft {row['ttft_shown_median_s']}, itl {row['itl_shown_median_s']}, "
              f"errors {row['errors_shown_median_s']})", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="simulated runs per cell")
    parser.add_argument("--hours", type=float, default=4.0, help="each run's horizon")
    parser.add_argument(
        "--out", type=Path, default=None, help="result file (default bench/results/evidence_gate.json)"
    )
    args = parser.parse_args()
    started = time.monotonic()
    results = {"cells": cells(args.trials, args.hours)}
    plan = gate_plan()
    params = {
        "look_seconds": LOOK_SECONDS, "trials": args.trials, "hours": args.hours, "stage_share": STAGE_SHARE,
        "tests": list(plan.tests), "alpha": plan.alpha, "log_bound": plan.log_bound,
        "margin": plan.not_worse.model_dump() if plan.not_worse else None, "healthy_errors": HEALTHY_ERRORS,
        "sigma": TTFT_SIGMA, "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_result("evidence_gate", params, results, args.out)


if __name__ == "__main__":
    main()
