"""How often the latency checks' load gate lets a look be compared on an even split, by traffic (a finding
of the CI failure in test_answers_latency: at about 5 answers a second the comparison stalled for a minute).

The shipped gate (gateway/rollout/checks/latency.py `smoothed_load`, `load_ratio_bound`): a look's latency
is compared only where the bound on the candidate's requests per pod over the baseline's is at most
MAX_LOAD_RATIO. Here a 50/50 split over one pod each, so the true ratio is 1.0 and every look should be
comparable; Poisson requests per 1 s look, split at random. For each total rate: the share of looks compared
after the first minute, the longest run of looks left out, and the first look compared.

    python -m bench.load_gate   # -> bench/results/load_gate.json
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gateway.rollout.checks.latency import MAX_LOAD_RATIO, load_ratio_bound, smoothed_load
from gateway.rollout.increments import VariantLook

RESULTS = Path(__file__).parent / "results" / "load_gate.json"
RATES = (2.0, 5.0, 10.0, 25.0, 50.0)  # requests a second, both variants together
LOOKS, WARM, RUNS = 600, 60, 200  # 1 s looks: ten minutes, the first minute not counted


def one_run(rate: float, rng: np.random.Generator) -> tuple[float, int, int | None]:
    """(share of looks compared after WARM, longest run left out after WARM, first look compared)."""
    load = (0.0, 0.0)
    compared = []
    for total in rng.poisson(rate, LOOKS):
        mine = int(rng.binomial(total, 0.5))
        ours, theirs = VariantLook(requests=mine, pods=1), VariantLook(requests=int(total) - mine, pods=1)
        load = smoothed_load(load, ours, theirs)
        compared.append(load_ratio_bound(load, ours, theirs) <= MAX_LOAD_RATIO)
    after = compared[WARM:]
    longest = run = 0
    for ok in after:
        run = 0 if ok else run + 1
        longest = max(longest, run)
    first = next((i for i, ok in enumerate(compared) if ok), None)
    return sum(after) / len(after), longest, first


def main() -> None:
    rng = np.random.default_rng(46)
    rows = []
    for rate in RATES:
        runs = [one_run(rate, rng) for _ in range(RUNS)]
        shares = np.array([share for share, _, _ in runs])
        longest = np.array([gap for _, gap, _ in runs])
        firsts = [first for _, _, first in runs if first is not None]
        rows.append(
            {
                "requests_per_s": rate,
                "share_compared_median": round(float(np.median(shares)), 3),
                "share_compared_p10": round(float(np.quantile(shares, 0.1)), 3),
                "longest_left_out_s_median": int(np.median(longest)),
                "longest_left_out_s_p90": int(np.quantile(longest, 0.9)),
                "first_compared_s_median": int(np.median(firsts)) if firsts else None,
                "runs_never_compared": RUNS - len(firsts),
            }
        )
        print(json.dumps(rows[-1]))
    RESULTS.write_text(
        json.dumps(
            {
                "command": "python -m bench.load_gate",
                "looks": LOOKS,
                "warm": WARM,
                "runs": RUNS,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
