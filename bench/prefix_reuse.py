"""Prefix reuse under conversations: the share of a conversation's turns that reach the variant, and the
pod, that served its previous turn (whose prefix cache holds the conversation so far), for a random 50/50
split, for cohorts (`routing.affinity: [{header: x-user-id}]`) and for cohorts with `load_balancing:
ring_hash` on both variants.

The load is the locustfile's own ConversationUser (LOADTEST_CONVERSATIONS=1), run headless as a
subprocess, and the shares are its summary's. Each configuration gets a real Envoy of its own, built from
the builders' listener and routes as in bench/answer_hop.py (static clusters balanced as the builders
balance them, the answer filter left out: it does not route), in front of two stand-in upstreams per
variant that name their pod (graystack.local.standin --pod). The configurations run one after another.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx

from bench._common import envoy_binary, write_result
from bench.answer_hop import VARIANTS, answers_200, bootstrap
from graystack.local.gateway_stack import envoy_argv
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from loadtests.launch import LOCUSTFILE

PODS = 2  # per variant
SPLIT = {"weights": {"baseline": 50, "candidate": 50}}
COHORTS = {**SPLIT, "affinity": [{"header": "x-user-id"}]}
CONFIGS: dict[str, dict[str, Any]] = {
    "random": {"routing": SPLIT},
    "cohorts": {"routing": COHORTS},
    "cohorts_ring_hash": {
        "routing": COHORTS,
        "variants": {v: {"load_balancing": "ring_hash"} for v in VARIANTS},
    },
}


def start_pods(logs: Path) -> tuple[dict[str, list[str]], list[ManagedProcess]]:
    """PODS stand-ins per variant, each naming its variant and its pod; their endpoints by variant."""
    endpoints: dict[str, list[str]] = {v: [] for v in VARIANTS}
    processes = []
    for variant in VARIANTS:
        for i in range(PODS):
            port = free_port()
            argv = [sys.executable, "-m", "graystack.local.standin", "--name", variant]
            argv += ["--pod", f"{variant}-{i}", "--port", str(port)]
            processes.append(start_process(f"{variant}-{i}", argv, logs))
            endpoints[variant].append(f"127.0.0.1:{port}")
    for hosts in endpoints.values():
        for host in hosts:
            wait_until(functools.partial(answers_200, f"http://{host}/readyz"), 30, f"the stand-in on {host}")
    return endpoints, processes


def conversations(
    name: str,
    endpoints: dict[str, list[str]],
    logs: Path,
    users: int,
    seconds: int,
    turns: int,
    requests: int | None = None,
) -> dict[str, Any]:
    """One configuration: its Envoy up, the conversation users through it for `seconds` (with `requests`:
    until Envoy has sent that many upstream, `seconds` the bound, then stopped as a user stops Locust,
    by SIGTERM, on which it writes its summary), their summary."""
    config = CONFIGS[name]
    variants = {
        v: {"endpoints": hosts, **config.get("variants", {}).get(v, {})} for v, hosts in endpoints.items()
    }
    listen, admin = free_port(), free_port()
    path = logs / f"envoy-{name}.yaml"
    upstream = int(endpoints["baseline"][0].rsplit(":", 1)[1])  # replaced by `variants`' own endpoints
    path.write_text(bootstrap(listen, admin, upstream, free_port(), False, config["routing"], variants))
    envoy = start_process(f"envoy-{name}", envoy_argv(envoy_binary(), path), logs)
    try:
        wait_until(functools.partial(answers_200, f"http://127.0.0.1:{admin}/ready"), 30, f"Envoy {name}")
        folder = logs / name
        env = {
            **os.environ,
            "LOAD_SHAPE": "none",
            "LOADTEST_CONVERSATIONS": "1",
            "LOADTEST_THINK_TIME": "0",
            "LOADTEST_PROMPT_LENGTHS": "64",
        }
        argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"]
        argv += ["--host", f"http://127.0.0.1:{listen}", "-u", str(users), "-r", str(users)]
        argv += ["--run-time", f"{seconds}s", "--stop-timeout", "2", "--conversation-turns", str(turns)]
        argv += ["--summary-dir", str(folder)]
        locust = start_process(f"locust-{name}", argv, logs, env)
        try:
            if requests is not None:
                sent = functools.partial(upstream_requests, f"http://127.0.0.1:{admin}")
                wait_until(lambda: sent() >= requests, seconds, f"{requests} requests through Envoy {name}")
                locust.popen.send_signal(signal.SIGTERM)
            locust.popen.wait(timeout=seconds + 60)
        finally:
            locust.stop()  # by its PID, if it outlived its run
        summary = json.loads((folder / "summary.json").read_text())
    finally:
        envoy.stop()
    turned = summary["conversations"]
    return {
        "requests": summary["requests"],
        "failures": summary["failures"],
        "turns_after_first": turned["turns"],
        "same_variant": turned["same_variant"],
        "same_pod": turned["same_pod"],
        "pod_turns": turned["pod_turns"],
        "same_variant_share": _rounded(turned["variant_share"]),
        "same_pod_share": _rounded(turned["pod_share"]),
    }


def _rounded(share: float | None) -> float | None:
    """A share to 4 places; None where no turn after a first was seen (nothing to divide)."""
    return None if share is None else round(share, 4)


def upstream_requests(admin: str) -> int:
    """The requests Envoy has sent to its clusters (every variant's), from its admin stats."""
    text = httpx.get(f"{admin}/stats", params={"filter": r"^cluster\..*\.upstream_rq_total$"}).text
    return sum(int(line.rpartition(": ")[2]) for line in text.splitlines() if line.strip())


def measure(
    names: list[str], users: int, seconds: int, turns: int, workdir: Path, requests: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each named configuration's shares, on one set of stand-in pods (stopped by PID after); `requests`:
    each runs until that many went through its Envoy (`seconds` the bound), not for `seconds`."""
    endpoints, processes = start_pods(workdir)
    try:
        return {
            name: conversations(name, endpoints, workdir, users, seconds, turns, requests) for name in names
        }
    finally:
        for process in processes:
            process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20, help="conversation users at once")
    parser.add_argument("--seconds", type=int, default=20, help="per configuration")
    parser.add_argument("--turns", type=int, default=4, help="per conversation")
    args = parser.parse_args()
    with TemporaryDirectory(prefix="bench-prefix-reuse-") as workdir:
        results = measure(list(CONFIGS), args.users, args.seconds, args.turns, Path(workdir))
    for name, r in results.items():
        print(
            f"{name:18s} turns {r['turns_after_first']:6d}  same variant {r['same_variant_share']:.1%}  "
            f"same pod {r['same_pod_share']:.1%}  failed {r['failures']}/{r['requests']}"
        )
    path = write_result(
        "prefix_reuse",
        {
            "users": args.users,
            "seconds_per_config": args.seconds,
            "turns_per_conversation": args.turns,
            "pods_per_variant": PODS,
            "think_time_s": 0,
            "prompt_bytes_per_turn": 64,
            "configs": CONFIGS,
            "load": "loadtests/locustfile.py ConversationUser (LOADTEST_CONVERSATIONS=1), headless",
            "envoy_concurrency": 2,
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
