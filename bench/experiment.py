"""strategy: experiment (issue 38 item 3), simulated through the shipped confidence sequences: how long an
even split takes to decide a TTFT difference, and how often the intervals miss the truth at any look.

What ships is what runs: the latency intervals are `bounds_batch` and `ratio_bounds`
(gateway/rollout/sequential/quantiles.py), the error intervals `error_rate_bounds`, each variant's at
the report's level alpha / PARTS (gateway/rollout/checks/experiment.py), on the grid the report keeps.
A 50/50 split; each variant gets RATE answers a second, read every LOOK seconds (Poisson counts per look);
TTFT lognormal (median 0.4 s, sigma 0.6, as research/sequential_analysis.md's simulations), the
candidate's scaled by the true ratio, so every quantile's ratio is that ratio.

Decided: the first look whose ratio interval excludes 1 (per quantile); "wrong way" counts runs decided
on the wrong side. Coverage: a run misses when any look's interval (either quantile, or the error-rate
difference) excludes the true value; the report promises at most alpha over all its intervals together.
A case with a true difference stops once every run decided both quantiles (its coverage is read up to
there); the equal case runs its whole horizon.

    python -m bench.experiment [--runs N] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import summarize, write_result
from gateway.rollout.checks.experiment import PARTS, QUANTILES
from gateway.rollout.sequential import error_rate_bounds
from gateway.rollout.sequential.quantiles import EDGES, GRID_RATIO, bin_of, bounds_batch, ratio_bounds

ALPHA = 0.05  # the spec's default experiment alpha
RATE = 10.0  # answers a second to each variant
LOOK = 5.0  # seconds between looks
MEDIAN, SIGMA = 0.4, 0.6
CASES = ((1.0, 3600.0), (1.1, 4 * 3600.0), (1.3, 3600.0))  # (true TTFT ratio, horizon in seconds)
ERROR_RATES = (0.005, 0.002)  # candidate, baseline: the error-rate difference's coverage case
ERROR_RUNS_LOOK = 30.0  # seconds between the error intervals' looks (a root search per run and look)


def _latency_case(rng: np.random.Generator, runs: int, ratio: float, horizon: float) -> dict[str, Any]:
    """Per quantile: the looks at which each run decided, wrong-way decisions, and runs that ever missed."""
    dense = {arm: np.zeros((runs, len(EDGES) + 1)) for arm in ("candidate", "baseline")}
    scale = {"candidate": MEDIAN * ratio, "baseline": MEDIAN}
    decided = {q: np.full(runs, np.nan) for q in QUANTILES}
    wrong = {q: np.zeros(runs, dtype=bool) for q in QUANTILES}
    missed = np.zeros(runs, dtype=bool)
    alpha = ALPHA / PARTS
    looks = int(horizon / LOOK)
    for look in range(1, looks + 1):
        bounds = {}
        for arm, counts in dense.items():
            n = rng.poisson(RATE * LOOK, runs)
            drawn = bin_of(rng.lognormal(math.log(scale[arm]), SIGMA, int(n.sum())))
            cells = np.repeat(np.arange(runs), n) * counts.shape[1] + drawn
            counts += np.bincount(cells, minlength=counts.size).reshape(counts.shape)
            cum, total = np.cumsum(counts[:, :-1], axis=1), counts.sum(axis=1)
            bounds[arm] = {q: bounds_batch(cum, total, q, alpha) for q in QUANTILES}
        for q in QUANTILES:
            lower, upper = ratio_bounds(bounds["candidate"][q], bounds["baseline"][q])
            missed |= (ratio < lower) | (ratio > upper)
            now = np.isnan(decided[q]) & ((lower > 1) | (upper < 1))
            decided[q][now] = look
            wrong[q] |= now & (upper < 1) if ratio > 1 else now & (lower > 1)
        if ratio != 1 and not any(np.isnan(d).any() for d in decided.values()):
            break  # every run decided both quantiles: coverage is read up to here
    return {"decided": decided, "wrong": wrong, "missed": missed, "looks": look}


def _error_coverage(rng: np.random.Generator, runs: int, horizon: float) -> float:
    """The share of runs whose error-rate difference interval excluded the truth at some look."""
    truth = ERROR_RATES[0] - ERROR_RATES[1]
    alpha = ALPHA / PARTS
    missed = 0
    for _ in range(runs):
        n = np.cumsum(rng.poisson(RATE * ERROR_RUNS_LOOK, (int(horizon / ERROR_RUNS_LOOK), 2)), axis=0)
        x = np.cumsum(rng.binomial(np.diff(n, axis=0, prepend=0), ERROR_RATES), axis=0)
        for (n_c, n_b), (x_c, x_b) in zip(n.tolist(), x.tolist(), strict=True):
            lo_c, hi_c = error_rate_bounds(x_c, n_c, alpha, 0.003)
            lo_b, hi_b = error_rate_bounds(x_b, n_b, alpha, 0.003)
            if not lo_c - hi_b <= truth <= hi_c - lo_b:
                missed += 1
                break
    return missed / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--error-runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    cases = []
    for ratio, horizon in CASES:
        found = _latency_case(rng, args.runs, ratio, horizon)
        row: dict[str, Any] = {
            "true_ttft_ratio": ratio,
            "horizon_seconds": horizon,
            "looks_read": found["looks"],
            "missed_at_any_look": float(found["missed"].mean()),
        }
        for q in QUANTILES:
            looks = found["decided"][q]
            done = looks[~np.isnan(looks)]
            seconds = (done * LOOK).tolist()
            row[f"p{round(q * 100)}"] = {
                "decided_share": round(float(len(done) / args.runs), 4),
                "wrong_way": int(found["wrong"][q].sum()),
                "seconds_to_decide": summarize(seconds, digits=1),
                "answers_per_variant_to_decide": summarize([s * RATE for s in seconds], digits=0),
            }
        cases.append(row)
        p50 = row["p50"]["seconds_to_decide"]
        print(
            f"TTFT x{ratio}: missed {row['missed_at_any_look']:.2%}; p50 decided {row['p50']['decided_share']:.1%}"
            f" (median {p50.get('p50', math.nan)} s), p90 decided {row['p90']['decided_share']:.1%}",
            flush=True,
        )
    error_missed = _error_coverage(rng, args.error_runs, 3600.0)
    print(f"error-rate difference {ERROR_RATES}: missed at some look in {error_missed:.2%} of runs")
    parameters = {
        "runs": args.runs,
        "error_runs": args.error_runs,
        "seed": args.seed,
        "alpha": ALPHA,
        "alpha_per_variant_interval": ALPHA / PARTS,
        "answers_per_second_per_variant": RATE,
        "look_seconds": LOOK,
        "ttft": {"median": MEDIAN, "sigma": SIGMA, "distribution": "lognormal"},
        "grid_ratio": GRID_RATIO,
        "error_rates": ERROR_RATES,
        "error_look_seconds": ERROR_RUNS_LOOK,
    }
    results = {
        "latency": cases,
        "error_difference_missed_at_any_look": error_missed,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(f"wrote {write_result('experiment', parameters, results, args.out)}")


if __name__ == "__main__":
    main()
