"""How long the rollout guard takes to move traffic off a failing candidate, and what fails meanwhile.

From fault onset (zero-layer's model server starts failing `--error-rate` of its requests: the
answer to POST /admin/faults) to every Envoy's ACK of the rollback, split into onset -> decision (the
rollback transition's time in the state) and decision -> ACK (graystack_rollback_seconds, as the
gateway measured it); all wall-clock times on one machine. Failed meanwhile: zero-layer's failed
attempts (its graystack_requests_total{code="500"}; the fallback retried each on the baseline) and
the requests whose client saw an error.

Setup: graystack.local.rollout_stack (real model servers and probes, the real gateway and Envoy, on
loopback), a rollout held at its --weight step (hold 1 h; 100: the candidate takes all the default
split), looks every 1 s (the `direct` provider's default) adding to the sequential tests, the default
max_error_rate of 0.3 % and false-rollback budget of 1 %. Clients send each of --rates requests/s of
1-token /v1/messages, half with `X-Client-Type: high_load` (a segment wholly on zero-layer). Each run:
10 s of clean traffic, the fault, the ACKed rollback, the fault cleared, `retry` (which starts new tests).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import httpx

from bench._common import RESULTS, envoy_binary, summarize, write_result
from graystack.local.processes import wait_until
from graystack.local.rollout_stack import RolloutStack, Traffic
from inference.families import REQUESTS

CLEAN_S = 10.0  # clean traffic before each fault


def rollout(weight: int) -> dict[str, Any]:
    return {
        "strategy": {"steps": [{"weight": weight, "hold": "1h"}, {"weight": 100}]},
        "analysis": {"max_latency_ratio": 10, "max_ttft_p95": "5s", "provider": {"type": "direct"}},
    }


def failed_attempts(stack: RolloutStack) -> float:
    url = f"{stack.server_url('zero-layer')}/metrics"
    return stack.metric(url, REQUESTS, {"variant": "zero-layer", "code": "500"})


def client_errors(traffic: Traffic) -> int:
    return sum(count for (code, _), count in traffic.snapshot().items() if code != 200)


def one_run(stack: RolloutStack, traffic: Traffic, error_rate: float) -> dict[str, Any]:
    time.sleep(CLEAN_S)
    attempts_before, errors_before = failed_attempts(stack), client_errors(traffic)
    stack.set_fault(error_rate)
    onset = time.time()
    rollout = cast(  # wait_until returns only a truthy result: here, the rollout
        "dict[str, Any]",
        wait_until(
            lambda: (r := stack.rollout())["phase"] == "rolled_back" and not r["rollback_in_flight"] and r,
            120,
            "the ACKed rollback",
            interval=0.1,
        ),
    )
    decided = rollout["history"][-1]["at"]
    acked = decided + rollout["last_rollback_seconds"]
    run = {
        "onset_to_ack_s": round(acked - onset, 4),
        "onset_to_decision_s": round(decided - onset, 4),
        "decision_to_ack_s": round(rollout["last_rollback_seconds"], 4),
        "failed_attempts": failed_attempts(stack) - attempts_before,
        "client_errors": client_errors(traffic) - errors_before,
        "reason": rollout["reason"],
    }
    stack.clear_fault()
    httpx.post(f"{stack.admin_url}/v1/rollout/retry", timeout=15).raise_for_status()
    return run


def measure(envoy: str, rate: float, runs: int, error_rate: float, weight: int) -> dict[str, Any]:
    """`runs` fault-and-rollback cycles on a fresh stack with clients at `rate` requests/s."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rollback-time-") as workdir:
        stack = RolloutStack(Path(workdir), envoy, rollout(weight))
        try:
            stack.start()
            with Traffic(stack.client.base_url, rate) as traffic:
                started = time.monotonic()
                for i in range(runs):
                    results.append(one_run(stack, traffic, error_rate))
                    print(
                        f"{rate:g} req/s, run {i + 1}: "
                        + ", ".join(f"{k} {v}" for k, v in results[-1].items() if k != "reason")
                    )
                elapsed = time.monotonic() - started
            served = traffic.snapshot()
        finally:
            stack.stop()
    summary = {
        key: summarize([run[key] for run in results])
        for key in (
            "onset_to_ack_s",
            "onset_to_decision_s",
            "decision_to_ack_s",
            "failed_attempts",
            "client_errors",
        )
    }
    return {**summary, "achieved_rate": round(sum(served.values()) / elapsed, 1), "runs": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        default=[20.0, 40.0, 80.0],
        help="client requests per second, in all",
    )
    parser.add_argument("--error-rate", type=float, default=0.05, help="zero-layer's injected error rate")
    parser.add_argument("--weight", type=int, default=20, help="the candidate's step weight (100: all of it)")
    args = parser.parse_args()
    envoy = envoy_binary()
    by_rate = {
        f"{rate:g}": measure(envoy, rate, args.runs, args.error_rate, args.weight) for rate in args.rates
    }
    parameters = {
        "runs": args.runs,
        "rates": args.rates,
        "error_rate": args.error_rate,
        "segment_share": 0.5,
        "step_weight": args.weight,
        "rollout": rollout(args.weight),
    }
    out = None if args.weight == 20 else RESULTS / f"rollback_time_weight{args.weight}.json"
    path = write_result("rollback_time", parameters, {"by_rate": by_rate}, out)
    for rate, result in by_rate.items():
        print(
            f"{rate} req/s: onset -> ACK median {result['onset_to_ack_s']['p50']:.2f} s over {args.runs} runs"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
