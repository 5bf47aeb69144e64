"""Prefix- and load-aware picking against Envoy's round robin and least-request (issue 37): TTFT p50/p99,
throughput and the prefix-hit share under the locustfile's conversation user, at about 60, 80 and 95 % of
the saturation throughput, on engines that are not interchangeable.

The pods: N engine stand-ins with a prefix cache (tests/support/prefix_engine.py: prefill time in
proportion to the uncached tokens, one prefill at a time, a batch of at most B running, the rest queued;
simulated time), one loopback address each; or (`--engines llama-cpp`) real llama.cpp servers with their
prompt cache (`cache_prompt`), one thread each. Before the pods, the real Envoy 1.40 of a GIE gateway
(tests/support/gie_data_plane.py): for `round_robin` and `least_request` its pool cluster balances alone;
for every other policy it asks `graystack epp` (override_host, ext_proc FULL_DUPLEX_STREAMED), started
with that policy's scorer weights (a scorer not named is weighted 0) and the conversation's user header
as the cohort key (`session`). A policy is `--policy NAME=SCORER:WEIGHT,...`; a scorer the picker does not
know stops the bench before anything starts.

The load (bench/_conversations.py): conversations as the locustfile's ConversationUser makes them (each
turn carries the whole conversation, a think time between turns). First the saturation throughput:
round robin, closed loop, more users than the pods hold. Then, per load level and per policy (the order
rotating so drift on this shared box hits all alike), new conversations arrive at the rate that makes
that share of it, for `--seconds`; the turns sent after `--warmup` count. Every policy starts on empty
caches (the stand-ins' `/reset_prefix_cache`; llama.cpp's servers restarted).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import os
import random
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench._common import RESULTS, brief, envoy_binary, summarize, write_result
from bench._conversations import Record, Shape, closed_loop, open_loop
from bench._pods import LlamaCppPods, Pods, standin_pods
from gateway.spec.endpoint_picker import SCORERS
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from loadtests import config
from tests.support.gie_data_plane import DataPlane, PickerAddress, Profile
from tests.support.prefix_engine import MODEL, Pace
from tests.support.third_party.models import MODEL_NAME

ENVOY_POLICIES: dict[str, Profile] = {"round_robin": "round_robin", "least_request": "least_request"}
PICKED = (
    "load=in_flight:1,queue:1,kv_cache:1",  # load alone
    "session=session:1,in_flight:1,queue:1,kv_cache:1",  # load and the cohort's pod (the defaults before prefix)
    "prefix=prefix:2,in_flight:1,queue:1,kv_cache:1",  # load and the prompt's blocks: no cohort key needed
    "defaults="
    + ",".join(f"{name}:{weight:g}" for name, weight in SCORERS.items() if weight),  # the picker's
)
USER_HEADER = "x-user-id"


@dataclass(frozen=True)
class Policy:
    """`scorers` None: Envoy balances alone (`profile`); else the picker with these weights."""

    name: str
    profile: Profile
    scorers: dict[str, float] | None = None


def parse_policy(text: str) -> Policy:
    """`NAME=SCORER:WEIGHT,...`; ValueError naming a scorer the picker does not know."""
    name, sep, weights = text.partition("=")
    if not sep or not name or name in ENVOY_POLICIES:
        raise ValueError(f"--policy {text!r} is not NAME=SCORER:WEIGHT,... (a name other than Envoy's own)")
    scorers: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in weights.split(","))):
        scorer, _, weight = item.partition(":")
        if scorer not in SCORERS:
            raise ValueError(
                f"--policy {name}: the picker has no scorer {scorer!r}; it has {sorted(SCORERS)}"
            )
        try:
            scorers[scorer] = float(weight or 1)
        except ValueError:
            raise ValueError(f"--policy {name}: {item!r} is not SCORER:WEIGHT") from None
    return Policy(name, "override_host", scorers)


def picker_argv(policy: Policy, pods: list[str], port: int, health: int, interval: float) -> list[str]:
    """`graystack epp` for one pool variant of `pods`, with the policy's weights and every other scorer at 0
    (the picker's own defaults would otherwise weigh them 1)."""
    weights = {scorer: 0.0 for scorer in SCORERS} | (policy.scorers or {})
    argv = [sys.executable, "-m", "graystack", "epp", "--insecure", "--log-level", "warning"]
    argv += ["--port", str(port), "--health-port", str(health), "--metrics-interval", str(interval)]
    argv += ["--pods", "pool=" + ",".join(pods), "--split", "pool=100", "--cohort-header", USER_HEADER]
    return argv + [f"--scorer={scorer}={weight:g}" for scorer, weight in weights.items()]


def listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


class Target:
    """One policy's data plane (and picker), started for its block and stopped after it."""

    def __init__(self, policy: Policy, pods: Pods, folder: Path, interval: float) -> None:
        self.policy, self.pods, self.folder, self.interval = policy, pods, folder, interval
        self.plane: DataPlane | None = None
        self.picker: ManagedProcess | None = None

    def __enter__(self) -> str:
        port = free_port()
        folder = self.folder / self.policy.name
        folder.mkdir(exist_ok=True)
        try:
            if self.policy.scorers is not None:
                argv = picker_argv(self.policy, self.pods.endpoints, port, free_port(), self.interval)
                self.picker = start_process(f"epp-{self.policy.name}", argv, folder)
                wait_until(functools.partial(listening, port), 30, "the picker")
            plane = DataPlane(
                envoy_binary(),
                folder,
                self.policy.profile,
                PickerAddress(port),
                self.pods.endpoints,
                timeout="0s",
            )
            self.plane = plane  # stopped by __exit__ even if its start fails
            plane.start()
        except BaseException:
            self.__exit__()
            raise
        return plane.url

    def __exit__(self, *_: object) -> None:
        for process in (self.plane, self.picker):
            if process is not None:
                process.stop()


def client(url: str) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    return httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(300, connect=10), limits=limits)


def window(record: Record, start: float, end: float, max_tokens: int) -> dict[str, Any]:
    """The turns sent in [start, end): their TTFT and errors; the turns ended in it: the throughput."""
    sent = [t for t in record.turns if start <= t.sent < end]
    good = [t for t in sent if t.error is None and t.ttft is not None]
    done = sum(1 for t in record.turns if t.error is None and start <= t.ended < end)
    prompt = sum(t.prompt_tokens for t in good)
    errors = [t.error for t in sent if t.error is not None]
    later = [t for t in good if t.same_pod is not None]
    return {
        "turns_sent": len(sent),
        "sent_per_s": round(len(sent) / (end - start), 2),
        "throughput_per_s": round(done / (end - start), 2),
        "output_tokens_per_s": round(done * max_tokens / (end - start), 1),
        "ttft_ms": summarize([t.ttft for t in good if t.ttft is not None], 1000, 1),
        "e2e_ms": summarize([t.ended - t.sent for t in good], 1000, 1),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "cached_share_of_answers": round(sum(t.cached_tokens for t in good) / prompt, 3) if prompt else None,
        "same_pod_share": round(sum(bool(t.same_pod) for t in later) / len(later), 3) if later else None,
    }


async def saturation(args: argparse.Namespace, pods: Pods, shape: Shape, folder: Path) -> dict[str, Any]:
    """Round robin, closed loop: the requests per second the pods serve at most."""
    await pods.reset()
    with Target(Policy("round_robin", "round_robin"), pods, folder, args.metrics_interval) as url:
        async with client(url) as http:
            started = time.perf_counter()
            record = await closed_loop(http, shape, args.users, args.saturation_seconds, random.Random(1))
    measured = window(record, started + args.warmup, started + args.saturation_seconds, shape.max_tokens)
    turns = record.conversation_turns
    measured["turns_per_conversation"] = round(sum(turns) / len(turns), 2) if turns else shape.turns
    measured["users"] = args.users
    print(
        f"saturation: {measured['throughput_per_s']} turns/s, ttft {brief(measured['ttft_ms'])}", flush=True
    )
    return measured


async def block(
    args: argparse.Namespace, pods: Pods, shape: Shape, folder: Path, policy: Policy, rate: float, seed: int
) -> dict[str, Any]:
    """One policy at one arrival rate of conversations, from empty caches."""
    await pods.reset()
    with Target(policy, pods, folder, args.metrics_interval) as url:
        async with client(url) as http:
            started = time.perf_counter()
            counts: list[dict[str, float] | None] = []

            async def snapshot(at: float) -> None:
                await asyncio.sleep(max(0.0, at - time.perf_counter()))
                counts.append(await pods.counters())

            marks = asyncio.gather(snapshot(started + args.warmup), snapshot(started + args.seconds))
            record = await open_loop(http, shape, rate, args.seconds, random.Random(seed))
            await marks
    result = window(record, started + args.warmup, started + args.seconds, shape.max_tokens)
    before, after = counts
    if before is not None and after is not None and after["queries"] > before["queries"]:
        hits = (after["hits"] - before["hits"]) / (after["queries"] - before["queries"])
        result["prefix_hit_share"] = round(hits, 3)
    result["loadavg_1m"] = round(os.getloadavg()[0], 2)
    print(
        f"  {policy.name:14s} ttft {brief(result['ttft_ms'])}  {result['throughput_per_s']}/s  "
        f"hits {result.get('prefix_hit_share', result['cached_share_of_answers'])}  errors {result['errors']}",
        flush=True,
    )
    return result


async def run(args: argparse.Namespace, policies: list[Policy], pods: Pods, folder: Path) -> dict[str, Any]:
    shape = Shape(
        model=MODEL_NAME if args.engines == "llama-cpp" else MODEL,
        max_tokens=args.max_tokens,
        prompt_lengths=args.prompt_lengths,
        max_bytes=args.conversation_bytes,
    )
    results: dict[str, Any] = {"saturation": None, "loads": {}}
    if args.conversations_per_s:
        levels = [(f"{args.conversations_per_s:g} conversations/s", args.conversations_per_s)]
    else:
        results["saturation"] = await saturation(args, pods, shape, folder)
        per_second = results["saturation"]["throughput_per_s"]
        per_conversation = results["saturation"]["turns_per_conversation"]
        levels = [(f"{round(100 * load)}%", load * per_second / per_conversation) for load in args.loads]
    for index, (label, rate) in enumerate(levels):
        print(f"load {label}: {rate:.2f} conversations/s", flush=True)
        turn = index % len(policies)
        rows = {}
        for policy in [*policies[turn:], *policies[:turn]]:
            rows[policy.name] = row = await block(args, pods, shape, folder, policy, rate, seed=1000 + index)
            if results["saturation"] is not None:  # the load it was, the arrivals being random
                row["sent_share_of_saturation"] = round(
                    row["sent_per_s"] / results["saturation"]["throughput_per_s"], 3
                )
        results["loads"][label] = {
            "conversations_per_s": round(rate, 3),
            "policies": {p.name: rows[p.name] for p in policies},
            "ttft_p99_vs_round_robin": {
                p.name: ratio(rows["round_robin"]["ttft_ms"], rows[p.name]["ttft_ms"]) for p in policies
            },
        }
    return results


def ratio(base: dict[str, float], other: dict[str, float]) -> float | None:
    """How many times lower `other`'s p99 is than `base`'s."""
    if not base.get("n") or not other.get("n") or not other["p99"]:
        return None
    return round(base["p99"] / other["p99"], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", choices=["standin", "llama-cpp"], default="standin")
    parser.add_argument("--pods", type=int, default=None, help="default 4 stand-ins, 2 llama.cpp servers")
    parser.add_argument(
        "--policy",
        action="append",
        default=None,
        help=f"NAME=SCORER:WEIGHT,... a picker policy (scorers: {', '.join(SCORERS)}; one not named is 0); "
        f"default {' '.join(PICKED)}. round_robin and least_request (Envoy alone) always run",
    )
    parser.add_argument("--no-least-request", action="store_true", help="leave Envoy's least-request out")
    parser.add_argument("--loads", default="0.6,0.8,0.95", help="shares of the saturation throughput")
    parser.add_argument(
        "--conversations-per-s", type=float, default=None, help="one load, this rate: no saturation search"
    )
    parser.add_argument("--seconds", type=float, default=50, help="new conversations arrive this long")
    parser.add_argument("--warmup", type=float, default=10, help="the turns sent before this are not counted")
    parser.add_argument("--saturation-seconds", type=float, default=40)
    parser.add_argument("--users", type=int, default=64, help="closed-loop users when finding saturation")
    parser.add_argument("--max-tokens", type=int, default=config.DEFAULT_MAX_TOKENS)
    parser.add_argument("--prompt-lengths", default=config.DEFAULT_PROMPT_LENGTHS)
    parser.add_argument("--conversation-bytes", type=int, default=config.DEFAULT_CONVERSATION_BYTES)
    parser.add_argument("--context", type=int, default=8192, help="llama.cpp's context (tokens, 2 slots)")
    parser.add_argument("--metrics-interval", type=float, default=0.2, help="the picker's metrics reads (s)")
    for field in dataclasses.fields(Pace):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default
        )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke test under 2 minutes: 80 %% only, short"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default bench/results/epp_picking[_llama_cpp].json"
    )
    args = parser.parse_args()
    try:
        picked = [parse_policy(text) for text in args.policy or PICKED]
        args.loads = [float(share) for share in args.loads.split(",")]
    except ValueError as error:
        parser.error(str(error))
    if args.quick:
        args.loads, args.seconds, args.warmup, args.saturation_seconds = [0.8], 15, 4, 12
    args.pods = args.pods or (4 if args.engines == "standin" else 2)
    envoy = [Policy(name, profile) for name, profile in ENVOY_POLICIES.items()]
    if args.no_least_request:
        envoy = envoy[:1]
    policies = [*envoy, *picked]
    pace = Pace(**{field.name: getattr(args, field.name) for field in dataclasses.fields(Pace)})
    with tempfile.TemporaryDirectory(prefix="bench-picking-") as workdir:
        folder = Path(workdir)
        pods: Pods
        if args.engines == "standin":
            pods = standin_pods(args.pods, pace, folder)
        else:
            pods = LlamaCppPods(args.pods, folder, args.context).start()
        try:
            results = asyncio.run(run(args, policies, pods, folder))
        finally:
            pods.stop()
    parameters = {k: v for k, v in vars(args).items() if k not in ("out", "policy")}
    parameters["policies"] = {p.name: p.scorers or f"Envoy {p.profile}" for p in policies}
    unused = {f.name for f in dataclasses.fields(Pace)} if args.engines == "llama-cpp" else {"context"}
    parameters = {k: v for k, v in parameters.items() if k not in unused}
    name = "epp_picking" if args.engines == "standin" else "epp_picking_llama_cpp"
    print(f"wrote {write_result('epp_picking', parameters, results, args.out or RESULTS / f'{name}.json')}")


if __name__ == "__main__":
    main()
