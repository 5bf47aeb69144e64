"""How often the latency checks' load gate lets a look be compared, by traffic: on an even split, where it
should compare every look; with the candidate's pods busier, where it should compare none; and after a
stage makes the candidate busier, where it should stop comparing at once (a finding of the CI failure in
test_answers_latency: at about 5 answers a second the comparison stalled for a minute).

The gate (gateway/rollout/checks/latency.py `counted`, `busier`): a look's latency is compared only where
the candidate's requests per pod over the baseline's are, with confidence, at most MAX_LOAD_RATIO. Two
gates side by side on the same traffic:
  looks     the one that shipped before: counts decayed over 30 looks, the ratio's bound at 2 sigma with
            the steady-state spread of a decayed sum, 1/(2n), from the first look on
  requests  the shipped one: the share's bound (Wilson's, 2 sigma, on the effective number of requests)
            over a window of LOAD_REQUESTS requests must clear the max; the window starts again where
            the last RECENT_LOOKS looks show it crossed
One pod each; Poisson requests per 1 s look, each sent to the candidate with the share that gives the
per-pod ratio (1.0: 50/50; 1.5: 60/40; 2.33: 70/30; 0.25: 20/80). Steady: the share of the candidate's
requests compared after the first minute, the longest run of its looks left out, the first look compared.
A stage change after five minutes: the share of its requests compared after it, and the last look
compared (seconds after the change).

    python -m bench.load_gate   # -> bench/results/load_gate.json
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from gateway.rollout.checks.latency import MAX_LOAD_RATIO, busier, counted
from gateway.rollout.increments import VariantLook
from gateway.rollout.load_share import Window

RESULTS = Path(__file__).parent / "results" / "load_gate.json"
RATES = (2.0, 5.0, 10.0, 25.0, 50.0, 200.0)  # requests a second, both variants together
LOOKS, WARM, RUNS, STAGE = 600, 60, 200, 300  # 1 s looks: ten minutes, the first minute not counted
SCENARIOS = {  # name: (looks, the candidate's requests per pod over the baseline's) in turn
    "even": ((LOOKS, 1.0),),
    "busier 1.5": ((LOOKS, 1.5),),
    "busier 2.33": ((LOOKS, 7 / 3),),
    "20% -> 70%": ((STAGE, 0.25), (LOOKS - STAGE, 7 / 3)),
    "50% -> 60%": ((STAGE, 1.0), (LOOKS - STAGE, 1.5)),
}
RETIRED_LOOKS, RETIRED_Z = 30, 2.0


def looks_gate(state: list[float], mine: int, others: int) -> bool:
    """The gate that shipped before: decayed over RETIRED_LOOKS looks, the log ratio's spread 1/(2n)."""
    decay = 1 - 1 / RETIRED_LOOKS
    state[0], state[1] = decay * state[0] + mine, decay * state[1] + others
    if state[0] <= 0 or state[1] <= 0:
        return False
    bound = state[0] / state[1] * math.exp(RETIRED_Z * math.sqrt(1 / (2 * state[0]) + 1 / (2 * state[1])))
    return bound <= MAX_LOAD_RATIO


def requests_gate(state: list[Window], mine: int, others: int) -> bool:
    """The shipped gate, through the controller's own functions."""
    ours, theirs = VariantLook(requests=mine, pods=1), VariantLook(requests=others, pods=1)
    state[:] = counted(state[0], state[1], ours, theirs)
    return not busier(state[0], state[1], ours, theirs)


def one_run(rate: float, segments: tuple[tuple[int, float], ...], seed: int) -> dict[str, list[int]]:
    """Per gate, on the same traffic: the candidate's requests each look compared (0 where the gate left
    the look out), beside the key "sent": its requests each look."""
    rng = np.random.default_rng(seed)
    totals = rng.poisson(rate, LOOKS)
    shares = np.concatenate([np.full(looks, ratio / (1 + ratio)) for looks, ratio in segments])
    mine = rng.binomial(totals, shares)
    looks = [(int(m), int(t - m)) for m, t in zip(mine, totals, strict=True)]
    retired, shipped = [0.0, 0.0], [Window(), Window()]
    return {
        "sent": [m for m, _ in looks],
        "looks": [m * looks_gate(retired, m, o) for m, o in looks],
        "requests": [m * requests_gate(shipped, m, o) for m, o in looks],
    }


def longest_run_left_out(sent: list[int], compared: list[int]) -> int:
    """The most looks in a row with candidate requests, none compared."""
    longest = run = 0
    for requests, ok in zip(sent, compared, strict=True):
        if requests:
            run = 0 if ok else run + 1
            longest = max(longest, run)
    return longest


def steady(runs: list[dict[str, list[int]]], gate: str) -> dict[str, float | int | None]:
    shares = np.array([sum(run[gate][WARM:]) / max(sum(run["sent"][WARM:]), 1) for run in runs])
    longest = np.array([longest_run_left_out(run["sent"][WARM:], run[gate][WARM:]) for run in runs])
    firsts = [next(i for i, n in enumerate(run[gate]) if n) for run in runs if any(run[gate])]
    return {
        "share_compared_median": round(float(np.median(shares)), 3),
        "share_compared_p10": round(float(np.quantile(shares, 0.1)), 3),
        "share_compared_p90": round(float(np.quantile(shares, 0.9)), 3),
        "longest_left_out_looks_median": int(np.median(longest)),
        "longest_left_out_looks_p90": int(np.quantile(longest, 0.9)),
        "first_compared_s_median": int(np.median(firsts)) if firsts else None,
        "runs_never_compared": len(runs) - len(firsts),
    }


def after_stage(runs: list[dict[str, list[int]]], gate: str) -> dict[str, float | int]:
    shares = np.array([sum(run[gate][STAGE:]) / max(sum(run["sent"][STAGE:]), 1) for run in runs])
    last = np.array([max((i + 1 for i, n in enumerate(run[gate][STAGE:]) if n), default=0) for run in runs])
    return {
        "share_compared_after_median": round(float(np.median(shares)), 3),
        "share_compared_after_p90": round(float(np.quantile(shares, 0.9)), 3),
        "last_compared_after_s_median": int(np.median(last)),
        "last_compared_after_s_p90": int(np.quantile(last, 0.9)),
    }


def main() -> None:
    rows = []
    for scenario, segments in SCENARIOS.items():
        measure = steady if len(segments) == 1 else after_stage
        for rate in RATES:
            runs = [one_run(rate, segments, seed) for seed in range(RUNS)]
            row: dict[str, object] = {"scenario": scenario, "requests_per_s": rate}
            row |= {gate: measure(runs, gate) for gate in ("looks", "requests")}
            rows.append(row)
            print(json.dumps(row))
    RESULTS.write_text(
        json.dumps(
            {
                "command": "python -m bench.load_gate",
                "max_load_ratio": MAX_LOAD_RATIO,
                "looks": LOOKS,
                "warm": WARM,
                "stage_change_s": STAGE,
                "runs": RUNS,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
