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

The latency and error rows run with no quality check on (alpha / 10). The judge's win rate (`--judge`,
its own JSON, experiment_judge.json): each judge call a tie with probability JUDGE_TIES, else a win for
the candidate with the true win rate (0.6, and 0.5 for no difference, where "wrong way" is any
decision); a look every JUDGE_LOOK calls; the interval `report` itself gives, at the level it runs with
the judge the one quality check on (alpha / 11) and with all three on (alpha / 14).

    python -m bench.experiment [--runs N] [--out PATH]
    python -m bench.experiment --judge [--runs N] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import RESULTS, summarize, write_result
from gateway.rollout.checks.experiment import (
    PARTS,
    QUANTILES,
    ExperimentSettings,
    ExperimentTests,
    QualityOn,
    report,
)
from gateway.rollout.sequential import error_rate_bounds
from gateway.rollout.sequential.quantiles import EDGES, GRID_RATIO, bin_of, bounds_batch, ratio_bounds

ALPHA = 0.05  # the spec's default experiment alpha
RATE = 10.0  # answers a second to each variant
LOOK = 5.0  # seconds between looks
MEDIAN, SIGMA = 0.4, 0.6
CASES = ((1.0, 3600.0), (1.1, 4 * 3600.0), (1.3, 3600.0))  # (true TTFT ratio, horizon in seconds)
ERROR_RATES = (0.005, 0.002)  # candidate, baseline: the error-rate difference's coverage case
ERROR_RUNS_LOOK = 30.0  # seconds between the error intervals' looks (a root search per run and look)
JUDGE_WIN_RATES = (0.6, 0.5)  # the candidate's true share of the judge's decisive verdicts
JUDGE_TIES = 0.2  # the share of the judge's calls that end in a tie
JUDGE_LOOK = 10  # judge calls between looks
JUDGE_CALLS = 3000  # the horizon: 15 h of the judge's default budget (200 calls an hour)
JUDGE_ON = {  # which quality checks are on -> the report's settings (the union bound's count differs)
    "judge only": QualityOn(judge=True),
    "all three": QualityOn(structure=True, greedy_prior=0.95, judge=True),
}


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


def _judge_case(
    rng: np.random.Generator, runs: int, win: float, settings: ExperimentSettings
) -> dict[str, Any]:
    """The judge's win-rate interval, read every JUDGE_LOOK calls up to JUDGE_CALLS: when each run decided
    (calls), which way, and how many runs' interval ever left out the true rate."""
    looks = JUDGE_CALLS // JUDGE_LOOK
    ties = np.cumsum(rng.binomial(JUDGE_LOOK, JUDGE_TIES, (runs, looks)), axis=1)
    decisive = np.arange(1, looks + 1) * JUDGE_LOOK - ties
    wins = np.cumsum(rng.binomial(np.diff(decisive, axis=1, prepend=0), win), axis=1)
    interval = _memo(settings)
    decided, wrong, missed = [], 0, 0
    for run in range(runs):
        first, miss = None, False
        for look in range(looks):
            lower, upper = interval(int(decisive[run, look]), int(wins[run, look]))
            miss |= not lower <= win <= upper
            if first is None and (lower > 0.5 or upper < 0.5):
                first = (look + 1) * JUDGE_LOOK
                wrong += (upper < 0.5 and win >= 0.5) or (lower > 0.5 and win <= 0.5)
        decided += [first] if first is not None else []
        missed += miss
    return {
        "true_win_rate": win,
        "decided_share": round(len(decided) / runs, 4),
        "wrong_way": int(wrong),
        "judge_calls_to_decide": summarize(decided, digits=0),
        "missed_at_any_look": missed / runs,
    }


def _memo(settings: ExperimentSettings) -> Callable[[int, int], tuple[float, float]]:
    """The report's judge_win_rate interval for (decisive, wins), each computed once (a root search)."""
    cache: dict[tuple[int, int], tuple[float, float]] = {}

    def interval(decisive: int, wins: int) -> tuple[float, float]:
        if (decisive, wins) not in cache:
            found = report(ExperimentTests(judged=(decisive, wins, 0)), settings).quality
            cache[decisive, wins] = (found[0].lower, found[0].upper) if found else (0.0, 1.0)
        return cache[decisive, wins]

    return interval


def _judge(args: argparse.Namespace) -> None:
    rng, started, rows = np.random.default_rng(args.seed), time.monotonic(), []
    for on, quality in JUDGE_ON.items():
        settings = ExperimentSettings(ALPHA, 0.003, errors_randomised=True, quality=quality)
        for win in JUDGE_WIN_RATES:
            row = {"quality_on": on, "alpha_per_interval": ALPHA / settings.parts,
                   **_judge_case(rng, args.runs, win, settings)}  # fmt: skip
            rows.append(row)
            calls = row["judge_calls_to_decide"]
            print(f"judge {on}, win {win}: decided {row['decided_share']:.1%} (median {calls.get('p50')} calls),"
                  f" wrong way {row['wrong_way']}, missed {row['missed_at_any_look']:.2%}", flush=True)  # fmt: skip
    parameters = {"runs": args.runs, "seed": args.seed, "alpha": ALPHA, "ties": JUDGE_TIES,
                  "look_judge_calls": JUDGE_LOOK, "judge_calls": JUDGE_CALLS}  # fmt: skip
    results = {"judge_win_rate": rows, "seconds": round(time.monotonic() - started, 1)}
    out = args.out or RESULTS / "experiment_judge.json"  # beside the full run's, which it leaves as it is
    print(f"wrote {write_result('experiment', parameters, results, out)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--error-runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--judge", action="store_true", help="the judge's win rate only (its own JSON)")
    args = parser.parse_args()
    if args.judge:
        _judge(args)
        return
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
