"""How long the data plane's split proof takes (gateway/rollout/sequential/split.py), simulated with the
shipped statistic: after a weight change, answers arrive at RATE per second and are looked at every
second, each from the candidate's endpoints with the share the data plane serves. `shown`: a data
plane that serves the asked share, seconds until it is shown; `refuted`: one that sends the candidate
nothing (the canary's traffic goes nowhere), seconds until it is refuted; at alpha 1 % (the level a
rollout with a 1 % budget and a few tests gives each). What a real gateway adds (its Accepted, its
translator's lag) is not in it.

    python -m bench.split_proof [--runs N]
"""

from __future__ import annotations

import argparse

import numpy as np

from bench._common import summarize, write_result
from gateway.rollout.sequential.split import band, proofs

ALPHA = 0.01
ASKED = (0.01, 0.05, 0.5)
RATES = (5, 50, 500)  # answers per second reaching the route
LIMIT_S = 3600  # a proof not reached in an hour is counted as not reached


def seconds_to(proof: int, served: float, asked: float, rate: int, runs: int, seed: int) -> list[float]:
    """Per run, the seconds until `proofs` first says `proof` (1 shown, -1 refuted); runs that did not
    within LIMIT_S are left out (their share is reported apart)."""
    rng = np.random.default_rng(seed)
    candidate = np.zeros(runs, dtype=np.int64)
    answers = np.zeros(runs, dtype=np.int64)
    first = np.zeros(runs)
    for second in range(1, LIMIT_S + 1):
        arrived = rng.poisson(rate, runs)
        candidate += rng.binomial(arrived, served)
        answers += arrived
        found = proofs(candidate, answers, asked, ALPHA)
        first = np.where((first == 0) & (found == proof), second, first)
        if first.all():
            break
    return [float(s) for s in first if s > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    results = {}
    for i, asked in enumerate(ASKED):
        for j, rate in enumerate(RATES):
            seed = 100 * i + j
            shown = seconds_to(1, asked, asked, rate, args.runs, seed)
            refuted = seconds_to(-1, 0.0, asked, rate, args.runs, seed + 50)
            low, high = band(asked)
            results[f"{asked:.0%} at {rate}/s"] = {
                "band": [low, high],
                "shown_s": summarize(shown, digits=1),
                "shown_share": len(shown) / args.runs,
                "refuted_s": summarize(refuted, digits=1),
                "refuted_share": len(refuted) / args.runs,
            }
            print(
                f"{asked:>4.0%} at {rate:>3}/s: shown p50 {np.median(shown) if shown else float('nan'):.0f} s "
                f"({len(shown) / args.runs:.0%} within {LIMIT_S} s); nothing served refuted p50 "
                f"{np.median(refuted) if refuted else float('nan'):.0f} s"
            )
    parameters = {"alpha": ALPHA, "runs": args.runs, "look_s": 1, "limit_s": LIMIT_S}
    print(write_result("split_proof", parameters, results))


if __name__ == "__main__":
    main()
