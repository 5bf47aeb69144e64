"""Round robin against least-request: each variant's TTFT through the real Envoy, two pods per variant,
under the load test's default mix.

The pods are engine stand-ins (tests/support/engine_standin.py), NOT model servers: sleep-paced asyncio
engines whose capacity is their own (prefill in proportion to the prompt, one at a time; decode steps
shared by the active streams and slower the more there are; answers that stop at a random length up to
max_tokens). Real model servers would share this machine's 2 cores with each other, Envoy and the client,
and that contention would hide which pod a policy chose. Everything else is real: `graystack gateway`,
Envoy 1.40, the spec's `load_balancing` switched by a spec edit.

The load is the locustfile's default (loadtests.config: X-Client-Type mix, prompt lengths, max_tokens, think
time), streamed Messages requests from closed-loop users, each with its own connection; TTFT is the first
`content_block_delta` the client sees (loadtests.stream). The default split is 50/50 so both variants
carry load (the rules send `high_load` to zero-layer and `mobile` 80/20). Both policies run side by side
in one run, in interleaved blocks alternating which goes first; each block starts from idle pods and
leaves out the requests sent in its first seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench._common import RESULTS, brief, envoy_binary, summarize, write_result
from graystack.local.gateway_stack import GatewayStack
from loadtests import config
from loadtests.stream import StreamError, StreamTiming, sse_events
from tests.support.engine_pods import EnginePods
from tests.support.engine_standin import Pace

POLICIES = ("round_robin", "least_request")
PODS = {
    "baseline-0": "baseline",
    "baseline-1": "baseline",
    "zero-layer-0": "zero-layer",
    "zero-layer-1": "zero-layer",
}
SPEC_CHANGES = {"health_check": None}  # the stand-ins never fail; a spec edit then never waits on checks


@dataclass
class Block:
    """What one block of one policy saw: TTFT per variant, failures, requests in flight."""

    ttft: dict[str, list[float]] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)
    in_flight: list[int] = field(default_factory=list)
    counted: int = 0


def set_policy(stack: GatewayStack, policy: str) -> None:
    """Every variant balanced by `policy`, once Envoy ACKed it (an unchanged spec is not written: the
    gateway would make no new generation to wait for)."""
    spec = stack.spec
    if all(v.get("load_balancing") == policy for v in spec["variants"].values()):
        return
    for variant in spec["variants"].values():
        variant["load_balancing"] = policy
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


async def one_request(
    client: httpx.AsyncClient, rng: random.Random, mix: dict[str, Any]
) -> tuple[str, float]:
    """One streamed Messages request of the default mix; (variant, TTFT seconds)."""
    client_type = config.weighted_choice(mix["client_types"], rng)
    length = config.weighted_choice(mix["prompt_lengths"], rng)
    body = {
        "model": "stand-in",
        "max_tokens": mix["max_tokens"],
        "stream": True,
        "messages": [{"role": "user", "content": config.prompt_text(length, rng)}],
    }
    headers = {} if client_type == config.NO_HEADER else {"X-Client-Type": client_type}
    timing = StreamTiming(time.perf_counter())
    async with client.stream("POST", "/v1/messages", json=body, headers=headers) as response:
        if response.status_code != 200:
            raise StreamError(f"status {response.status_code}")
        lines: list[str] = []
        async for line in response.aiter_lines():
            if line:
                lines.append(line)
                continue
            for event in sse_events([*lines, ""]):
                timing.record(event, time.perf_counter())
            lines = []
    timing.check_complete()
    if timing.ttft is None:
        raise StreamError("no content")
    return response.headers["x-graystack-variant"], timing.ttft


async def run_block(
    url: str, users: int, seconds: float, warmup: float, mix: dict[str, Any], seed: int
) -> Block:
    block = Block()
    started = time.perf_counter()
    ends = started + seconds
    active = 0

    async def user(index: int) -> None:
        nonlocal active
        rng = random.Random(seed * 10_000 + index)
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await asyncio.sleep(rng.uniform(*mix["think_time"]))  # users start spread out
            while time.perf_counter() < ends:
                sent = time.perf_counter()
                active += 1
                try:
                    variant, ttft = await one_request(client, rng, mix)
                except (StreamError, httpx.HTTPError) as error:
                    block.failures[f"{type(error).__name__}: {error}"[:120]] += 1
                else:
                    if sent - started >= warmup:
                        block.ttft.setdefault(variant, []).append(ttft)
                        block.counted += 1
                finally:
                    active -= 1
                await asyncio.sleep(rng.uniform(*mix["think_time"]))

    async def sample() -> None:
        while time.perf_counter() < ends:
            await asyncio.sleep(0.25)
            if time.perf_counter() - started >= warmup:
                block.in_flight.append(active)

    await asyncio.gather(sample(), *(user(i) for i in range(users)))
    return block


def measure(
    stack: GatewayStack, users: int, blocks: int, seconds: float, warmup: float, mix: dict[str, Any]
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{stack.ports['listen']}"
    ttft: dict[str, dict[str, list[float]]] = {p: {} for p in POLICIES}
    seen: dict[str, dict[str, Any]] = {
        p: {"failures": Counter(), "requests": 0, "in_flight": [], "seconds": 0.0, "blocks": []}
        for p in POLICIES
    }
    loads = []
    for b in range(blocks):
        for policy in POLICIES if b % 2 == 0 else POLICIES[::-1]:
            set_policy(stack, policy)
            block = asyncio.run(
                run_block(url, users, seconds, warmup, mix, seed=b * 2 + POLICIES.index(policy))
            )
            for variant, values in block.ttft.items():
                ttft[policy].setdefault(variant, []).extend(values)
            seen[policy]["failures"] += block.failures
            seen[policy]["blocks"].append(
                {v: {q: summarize(t, 1000)[q] for q in ("p50", "p99")} for v, t in sorted(block.ttft.items())}
            )
            seen[policy]["requests"] += block.counted
            seen[policy]["in_flight"] += block.in_flight
            seen[policy]["seconds"] += seconds - warmup
            loads.append(os.getloadavg()[0])
    results: dict[str, Any] = {}
    for policy in POLICIES:
        s = seen[policy]
        flight = s["in_flight"]
        results[policy] = {
            "ttft_ms": {v: summarize(values, 1000) for v, values in sorted(ttft[policy].items())},
            "requests_per_s": round(s["requests"] / s["seconds"], 2),
            "mean_in_flight": round(sum(flight) / max(1, len(flight)), 1),
            "failures": dict(s["failures"]),
            "ttft_ms_per_block": s["blocks"],  # the spread between blocks: how far apart is noise
        }
    results["loadavg_1min_after_blocks"] = [round(x, 2) for x in loads]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="24,48", help="closed-loop users per load level, comma-separated")
    parser.add_argument("--blocks", type=int, default=3, help="blocks per policy and load level")
    parser.add_argument("--seconds", type=float, default=25.0, help="length of one block")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds at a block's start left out")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=config.DEFAULT_MAX_TOKENS,
        help="longer answers than the default mix's; the result then goes to load_balancing_max_tokens_N.json",
    )
    args = parser.parse_args()
    mix = {
        "client_types": config.parse_mix(config.DEFAULT_CLIENT_TYPES, "client types"),
        "prompt_lengths": config.parse_prompt_lengths(config.DEFAULT_PROMPT_LENGTHS),
        "max_tokens": args.max_tokens,
        "think_time": config.parse_think_time(config.DEFAULT_THINK_TIME),
    }
    levels = [int(u) for u in args.users.split(",")]
    results = {}
    pods = EnginePods(PODS, spec_changes=SPEC_CHANGES)
    with tempfile.TemporaryDirectory(prefix="bench-lb-") as workdir:
        stack = GatewayStack(Path(workdir), envoy_binary(), upstreams=pods)
        try:
            stack.start()
            spec = stack.spec
            spec["routing"]["weights"] = {"baseline": 50, "zero-layer": 50}
            stack.write_spec(spec)
            for users in levels:
                level = measure(stack, users, args.blocks, args.seconds, args.warmup, mix)
                results[f"users_{users}"] = level
                for policy in POLICIES:
                    r = level[policy]
                    print(
                        f"{users} users, {policy}: {r['requests_per_s']} req/s, {r['mean_in_flight']} in flight, {sum(r['failures'].values())} failed"
                    )
                    for variant, stats in r["ttft_ms"].items():
                        print(f"  {variant:10s} TTFT {brief(stats)}")
        finally:
            stack.stop()
    path = write_result(
        "load_balancing",
        {
            "users": levels,
            "blocks_per_policy": args.blocks,
            "block_seconds": args.seconds,
            "warmup_seconds": args.warmup,
            "pods": PODS,
            "pace": asdict(Pace()),
            "mix": {
                "client_types": config.DEFAULT_CLIENT_TYPES,
                "prompt_lengths": config.DEFAULT_PROMPT_LENGTHS,
                "max_tokens": args.max_tokens,
                "think_time": config.DEFAULT_THINK_TIME,
            },
            "split": {
                "default": {"baseline": 50, "zero-layer": 50},
                "mobile": "80/20",
                "high_load": "zero-layer",
            },
            "least_request": "Envoy LEAST_REQUEST, selection_method FULL_SCAN",
        },
        results,
        None
        if args.max_tokens == config.DEFAULT_MAX_TOKENS
        else RESULTS / f"load_balancing_max_tokens_{args.max_tokens}.json",
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
