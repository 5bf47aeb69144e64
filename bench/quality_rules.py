"""Answer-quality checks as sequential tests: what they need to catch a worse candidate, and how often they
stop an identical one, through the kernels the controller runs.

  greedy     the share of greedy shadow answers that differ from the baseline's, against
             `max_greedy_disagreement` (E1, the mixture over alternatives above it, as `error_rate`)
  structure  the candidate's malformed answers (JSON that does not parse, ...) against the baseline's,
             at most `max_structure_ratio` times as often (R1, conditional on each look's total, as
             `error_ratio`): in a shadow stage each request has both answers (share 1/2), at a 5 % live
             stage the candidate has 5 % of them
  judge      the candidate's losses among the judge's decisive verdicts, against `max_loss` (E1)
Levels from the seed plan (bench.shipped_rules.seed_plan: alpha 0.2 % per test, log bound 6.21). A look
every 5 s with PAIRS_PER_LOOK answers (pairs, or the candidate's answers at the live stage).

detection: the answers (pairs, or candidate answers) seen when the test first fires; median and p90.
false_gates: the share of runs that fire within a week of shadow traffic with a candidate as good as the
  baseline: greedy answers differing exactly at the threshold (the null's worst case), the same 1 %
  malformed answers, a judge preferring neither (loss share 1/2).

    python -m bench.quality_rules [--trials N] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.shipped_rules import LOOK_SECONDS, seed_plan
from gateway.rollout.sequential import RatioTest, ThresholdTest, mixture, ratio_look, threshold_increments

PAIRS_PER_LOOK = 20  # 4 answers a second
GREEDY_MAX, STRUCTURE_RATIO, JUDGE_MAX_LOSS = 0.01, 2.0, 0.55
BASELINE_MALFORMED = 0.01
WEEK_LOOKS = int(7 * 24 * 3600 / LOOK_SECONDS)
CHUNK = 240


class Threshold:
    """E1 over many runs: answers and events per look (runs, looks) -> the first firing look per run."""

    def __init__(self, p0: float, runs: int, bound: float) -> None:
        self.p0, self.bound = p0, bound
        self.alternatives = np.asarray(ThresholdTest.new(p0).alternatives)
        self.log_lr = np.zeros((runs, len(self.alternatives)))

    def looks(self, n: np.ndarray, x: np.ndarray) -> np.ndarray:
        path = self.log_lr[:, None, :] + threshold_increments(self.p0, self.alternatives, n, x).cumsum(axis=1)
        self.log_lr = path[:, -1]
        return mixture(path) >= self.bound


class Ratio:
    """R1 over many runs: (candidate n, x, baseline n, x) per look -> which looks fire."""

    def __init__(self, psi0: float, runs: int, bound: float) -> None:
        self.psi0, self.bound = psi0, bound
        self.alternatives = np.asarray(RatioTest.new(psi0).alternatives)
        self.log_lr = np.zeros((runs, len(self.alternatives)))

    def looks(self, *counts: np.ndarray) -> np.ndarray:
        steps = ratio_look(
            self.psi0, self.alternatives, np.zeros((*counts[0].shape, len(self.alternatives))),
            *(c[..., None] for c in counts),
        )  # fmt: skip
        path = self.log_lr[:, None, :] + steps.cumsum(axis=1)
        self.log_lr = path[:, -1]
        return mixture(path) >= self.bound


def _first(fires: np.ndarray, start: int, found: np.ndarray) -> np.ndarray:
    """Per run, the first firing look (1-based, counting from the run's start), kept once found."""
    hit = fires.any(axis=1) & (found == 0)
    return np.where(hit, start + fires.argmax(axis=1) + 1, found)


def _counts(rng: np.random.Generator, runs: int, looks: int, rate: float) -> tuple[np.ndarray, np.ndarray]:
    n = np.full((runs, looks), PAIRS_PER_LOOK)
    return n, rng.binomial(n, rate)


def first_fires(
    check: str, rate: float, live_share: float | None, runs: int, looks: int, seed: int
) -> np.ndarray:
    """Per run, the first look at which `check` fires on a candidate at `rate` (0: none within `looks`).
    greedy: the disagreement rate; structure: the candidate's malformed share (the baseline's is
    BASELINE_MALFORMED), paired in shadow or at `live_share` of live traffic; judge: the loss share."""
    rng = np.random.default_rng(seed)
    bound = seed_plan().log_bound
    found = np.zeros(runs, dtype=np.int64)
    if check == "structure":
        ratio = Ratio(STRUCTURE_RATIO, runs, bound)
        share = 0.5 if live_share is None else live_share

        def look(size: int) -> np.ndarray:
            cand_n, cand_x = _counts(rng, runs, size, rate)
            base_n = np.full((runs, size), round(PAIRS_PER_LOOK * (1 - share) / share))
            return ratio.looks(cand_n, cand_x, base_n, rng.binomial(base_n, BASELINE_MALFORMED))

    else:
        test = Threshold(GREEDY_MAX if check == "greedy" else JUDGE_MAX_LOSS, runs, bound)

        def look(size: int) -> np.ndarray:
            return test.looks(*_counts(rng, runs, size, rate))

    for start in range(0, looks, CHUNK):
        found = _first(look(min(CHUNK, looks - start)), start, found)
        if found.all():
            break
    return found


def detection(check: str, rate: float, live_share: float | None, runs: int, seed: int) -> dict[str, Any]:
    first = first_fires(check, rate, live_share, runs, 20_000, seed)
    answers = first[first > 0] * PAIRS_PER_LOOK
    return {
        "check": check, "rate": rate, "where": "shadow" if live_share is None else f"live {live_share:.0%}",
        "median_answers": float(np.median(answers)) if len(answers) else None,
        "p90_answers": float(np.percentile(answers, 90)) if len(answers) else None,
        "detected_share": round(float((first > 0).mean()), 4),
    }  # fmt: skip


def false_gates(check: str, rate: float, runs: int, seed: int) -> dict[str, Any]:
    first = first_fires(check, rate, None, runs, WEEK_LOOKS, seed)
    return {"check": check, "rate": rate, "runs": runs, "share": round(float((first > 0).mean()), 5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="runs per cell")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/quality_rules.json")
    args = parser.parse_args()
    started = time.monotonic()
    found = [
        detection("greedy", rate, None, args.trials, 7000 + i) for i, rate in enumerate((0.02, 0.05, 0.2))
    ]
    found += [
        detection("structure", 0.05, share, args.trials, 7100 + i) for i, share in enumerate((None, 0.05))
    ]
    found += [detection("judge", loss, None, args.trials, 7200 + i) for i, loss in enumerate((0.6, 0.7))]
    false = [
        false_gates("greedy", GREEDY_MAX, args.trials, 7300),
        false_gates("structure", BASELINE_MALFORMED, args.trials, 7301),
        false_gates("judge", 0.5, args.trials, 7302),
    ]
    for row in found:
        print(f"detection {row['check']:9} at {row['rate']:.0%} ({row['where']}): median {row['median_answers']} "
              f"answers, p90 {row['p90_answers']}, detected {row['detected_share']:.0%}")  # fmt: skip
    for row in false:
        print(f"false gates {row['check']:9} at {row['rate']:.0%} over a week: {row['share']:.2%}")
    plan = seed_plan()
    params = {
        "look_seconds": LOOK_SECONDS, "answers_per_look": PAIRS_PER_LOOK, "trials": args.trials,
        "alpha_per_test": plan.alpha, "log_bound": plan.log_bound, "max_greedy_disagreement": GREEDY_MAX,
        "max_structure_ratio": STRUCTURE_RATIO, "judge_max_loss": JUDGE_MAX_LOSS,
        "baseline_malformed": BASELINE_MALFORMED, "week_looks": WEEK_LOOKS,
        "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    write_result("quality_rules", params, {"detection": found, "false_gates": false}, args.out)


if __name__ == "__main__":
    main()
