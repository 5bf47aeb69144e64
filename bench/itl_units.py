"""Inter-token latency compared per token against per request: false rollbacks and detection times.

`itl_vs_baseline` is the shift test (gateway/rollout/sequential/latency.py) on histogram increments.
Its guarantee assumes each observation's variant was chosen at random, independently. The gateway
chooses per request, and a request's gaps between tokens share its moment on the server (its batch,
its prompt, the pod's queue), so per-token counts weigh one request as dozens of independent ones.

Traffic: each variant gets Poisson(rate x look) requests per look; a request's gaps are
`gap x f_request x f_token` with f_request ~ lognormal(0, sigma_request) shared by the request's
TOKENS - 1 gaps and f_token ~ lognormal(0, sigma_token) each, gap 20 ms; binned into the model server's
inter-token buckets (inference/server/telemetry.py). The candidate is identical (healthy) or `slowdown`
times slower (all its gaps). Per token: every gap is an observation, as `vllm:inter_token_latency_seconds`
and the old `graystack_request_inter_token_seconds` count them. Per request: one observation, the
request's mean gap, as `graystack_request_time_per_output_token_seconds` and
`vllm:request_time_per_output_token_seconds` count them. Levels are the seed plan's, looks every 5 s,
the wealth and the change detector both, as the controller runs them (shipped_rules.ShiftTests).

false_rollbacks: share of healthy runs that fire within `hours`. detection: median seconds to the
first firing look for a candidate slower from the start.

    python -m bench.itl_units [--runs N] [--hours H]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import write_result
from bench.shipped_rules import LOOK_SECONDS, ShiftTests, seed_plan
from inference.server.telemetry import INTER_TOKEN_BUCKETS

TOKENS = 32  # new tokens per request: the locustfile's default
GAP = 0.02  # median seconds between tokens
SIGMA_REQUEST = 0.3  # spread of a request's own pace (batch, prompt, queue)
SIGMA_TOKEN = 0.15  # spread of one gap around its request's pace
RATE = 1.0  # requests per second to each variant
UNITS = ("token", "request")


def histogram(gaps_per_run: list[np.ndarray], edges: np.ndarray) -> np.ndarray:
    """Cumulative counts at each edge, then the total, per run: (runs, E+1)."""
    rows = [np.searchsorted(np.sort(g), edges, side="right") for g in gaps_per_run]
    return np.column_stack([rows, [len(g) for g in gaps_per_run]])


def look_gaps(rng: np.random.Generator, runs: int, slowdown: float, unit: str) -> list[np.ndarray]:
    """One look's observations of one variant, per run: every gap, or each request's mean gap."""
    out = []
    for n in rng.poisson(RATE * LOOK_SECONDS, size=runs):
        pace = GAP * slowdown * rng.lognormal(0.0, SIGMA_REQUEST, size=(n, 1))
        gaps = pace * rng.lognormal(0.0, SIGMA_TOKEN, size=(n, TOKENS - 1))
        out.append(gaps.ravel() if unit == "token" else gaps.mean(axis=1))
    return out


def simulate(unit: str, slowdown: float, runs: int, looks: int, seed: int) -> np.ndarray:
    """The look (1-based) at which each run first fires, 0 where it never does."""
    edges = np.asarray(INTER_TOKEN_BUCKETS)
    tests = ShiftTests(seed_plan(), runs, edges)
    fired_at = np.zeros(runs, dtype=int)
    rng = np.random.default_rng(seed)
    for look in range(1, looks + 1):
        cand = histogram(look_gaps(rng, runs, slowdown, unit), edges)
        base = histogram(look_gaps(rng, runs, 1.0, unit), edges)
        fired = tests.look(cand, base)
        fired_at[(fired_at == 0) & fired] = look
        if slowdown > 1 and fired_at.all():
            break
    return fired_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--out", type=str, default=None)
    args = parser.parse_args()
    looks = int(args.hours * 3600 / LOOK_SECONDS)
    results: dict[str, dict[str, Any]] = {}
    for unit in UNITS:
        began = time.perf_counter()
        healthy = simulate(unit, 1.0, args.runs, looks, seed=1)
        slower = {s: simulate(unit, s, args.runs, looks, seed=2) for s in (1.5, 2.0)}
        results[unit] = {
            "false_rollbacks": float((healthy > 0).mean()),
            "false_rollbacks_fired": int((healthy > 0).sum()),
            **{
                f"detection_x{s}_median_s": (
                    float(np.median(np.where(at > 0, at, np.inf)) * LOOK_SECONDS) if (at > 0).any() else None
                )
                for s, at in slower.items()
            },
            "seconds": round(time.perf_counter() - began, 1),
        }
        print(unit, results[unit], flush=True)
    parameters = {
        "runs": args.runs,
        "hours": args.hours,
        "look_seconds": LOOK_SECONDS,
        "requests_per_second_each": RATE,
        "tokens": TOKENS,
        "gap_s": GAP,
        "sigma_request": SIGMA_REQUEST,
        "sigma_token": SIGMA_TOKEN,
    }
    path = write_result("itl_units", parameters, results, None if args.out is None else Path(args.out))
    print(path)


if __name__ == "__main__":
    main()
