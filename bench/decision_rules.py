"""The error-rate rule against the naive ratio, on simulated traffic: false rollbacks and detection time.

What the rollout controller does with its defaults (analysis every 5 s over a 60 s window whose last
15 s are also judged alone, threshold 0.3 %, min_requests 100), simulated second by second: a variant
gets Poisson(`rate`) requests a second, each failing with the true error rate. Each rule looks at
every interval:
  naive     the raw ratio over the window above the threshold (Flagger's and Argo Rollouts' check)
  window95  the exact 95 % lower bound over the window above the threshold (graystack's first rule)
  graystack gateway.rollout.stats.decide_error_rate as shipped: 99 % over the window, or 99.5 %
            over its most recent 15 s
Measured per rule and request rate:
  false rollbacks: the share of healthy hours (true rate 0.1 % or 0.2 %, a third or two thirds of the
    threshold) in which some look fails;
  detection: after 120 s at 0.1 %, the rate jumps to a regression (1-20 %) at a random second; the
    time from that second to the first failing look (median, p90), over the trials with no false
    rollback before the jump.
The shipped rule's verdicts come from decide_error_rate itself, tabulated per window size as the fewest
errors that fail it, so the simulation runs the shipped rule, not a copy.

    python -m bench.decision_rules [--trials 2000]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from bench._common import write_result
from gateway.rollout.stats import Verdict, decide_error_rate, exact_bounds

INTERVAL, WINDOW, RECENT, THRESHOLD, MIN_REQUESTS = 5, 60, 15, 0.003, 100
RATES = (1, 4, 16, 64)  # requests/s reaching the variant: a 5 % stage of 20 req/s ... a 20 % stage of 320
HEALTHY = (0.001, 0.002)
REGRESSIONS = (0.01, 0.02, 0.05, 0.2)
WARMUP = 120  # seconds of healthy traffic before a regression
RULES = ("naive", "window95", "graystack")


def _shipped_window(errors: int, requests: int) -> bool:
    return decide_error_rate(errors, requests, THRESHOLD, MIN_REQUESTS).verdict == Verdict.FAIL


def _shipped_recent(errors: int, requests: int) -> bool:
    decision = decide_error_rate(0, 0, THRESHOLD, MIN_REQUESTS, recent=(errors, requests))
    return decision.verdict == Verdict.FAIL


def _window95(errors: int, requests: int) -> bool:
    return requests > 0 and exact_bounds(errors, requests, 0.95).lower > THRESHOLD


_TABLES: dict[Callable[[int, int], bool], list[int]] = {}


def fewest_failing(rule: Callable[[int, int], bool], requests: np.ndarray) -> np.ndarray:
    """Per window: the fewest errors in its requests that `rule` fails (requests + 1 if none).

    Tabulated per window size, extended as needed: the fewest failing errors never drop as the
    window grows (every rule here fails on a lower bound), so each size starts from the last.
    """
    table = _TABLES.setdefault(rule, [1])  # no requests: one error is already more than seen
    while len(table) <= requests.max():
        size, errors = len(table), table[-1]
        while errors <= size and not rule(errors, size):
            errors += 1
        table.append(errors)
    return np.asarray(table)[requests]


def windows(requests: np.ndarray, errors: np.ndarray, seconds: int) -> tuple[np.ndarray, np.ndarray]:
    """Per trial and look (every INTERVAL seconds): requests and errors over the last `seconds`."""
    at = np.arange(INTERVAL, requests.shape[1] + 1, INTERVAL)
    start = np.maximum(at - seconds, 0)
    totals = [np.concatenate([np.zeros((len(a), 1), int), a.cumsum(1)], axis=1) for a in (requests, errors)]
    return tuple(total[:, at] - total[:, start] for total in totals)


def look_times(seconds: int) -> np.ndarray:
    return np.arange(INTERVAL, seconds + 1, INTERVAL)


def failing(rule: str, requests: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """Per trial and look: does `rule` fail the variant?"""
    window_r, window_e = windows(requests, errors, WINDOW)
    if rule == "naive":
        return (window_r > 0) & (window_e > THRESHOLD * window_r)
    if rule == "window95":
        return window_e >= fewest_failing(_window95, window_r)
    recent_r, recent_e = windows(requests, errors, RECENT)
    return (window_e >= fewest_failing(_shipped_window, window_r)) | (
        recent_e >= fewest_failing(_shipped_recent, recent_r)
    )


def traffic(rng: np.random.Generator, rate: float, error_rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per trial and second: requests and errors; `error_rate` per trial and second."""
    requests = rng.poisson(rate, size=error_rate.shape)
    return requests, rng.binomial(requests, error_rate)


def false_rollbacks(rng: np.random.Generator, rate: float, healthy: float, trials: int) -> dict[str, float]:
    requests, errors = traffic(rng, rate, np.full((trials, 3600), healthy))
    return {rule: float(failing(rule, requests, errors).any(1).mean()) for rule in RULES}


def detection(rng: np.random.Generator, rate: float, regression: float, trials: int) -> dict[str, dict]:
    seconds = WARMUP + 300
    onset = rng.integers(WARMUP - INTERVAL, WARMUP, size=trials)
    after = np.arange(seconds)[None, :] >= onset[:, None]
    requests, errors = traffic(rng, rate, np.where(after, regression, HEALTHY[0]))
    at = look_times(seconds)[None, :]
    found = {}
    for rule in RULES:
        fails = failing(rule, requests, errors)
        early = (fails & (at <= onset[:, None])).any(1)
        late = fails & (at > onset[:, None])
        delays = (at[0, late.argmax(1)] - onset)[late.any(1) & ~early]
        found[rule] = {
            "median_s": float(np.median(delays)) if len(delays) else None,
            "p90_s": float(np.percentile(delays, 90)) if len(delays) else None,
            "detected_within_300s": round(len(delays) / max(1, int((~early).sum())), 4),
            "false_before_onset": round(float(early.mean()), 4),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    results = []
    for rate in RATES:
        row = {"rate_rps": rate}
        for healthy in HEALTHY:
            row[f"false_rollback_per_hour_at_{healthy:.1%}"] = false_rollbacks(
                rng, rate, healthy, args.trials
            )
        for regression in REGRESSIONS:
            row[f"detection_at_{regression:.0%}"] = detection(rng, rate, regression, args.trials)
        results.append(row)
        print(rate, "req/s:", row)
    params = {
        "interval_s": INTERVAL,
        "window_s": WINDOW,
        "recent_s": RECENT,
        "threshold": THRESHOLD,
        "min_requests": MIN_REQUESTS,
        "trials": args.trials,
        "warmup_s": WARMUP,
    }
    write_result("decision_rules", params, {"rates": results})


if __name__ == "__main__":
    main()
