"""What measuring every answer costs the hop: the same requests through two real Envoys, one with the
answer filter and access log (what the builders ship) and one with both removed, side by side.

Both Envoys run the builders' own listener and routes (gateway/envoy/), made static so neither waits on a
control plane; the measuring one logs to the gateway's AnswerReceiver on a gRPC server in a process of
its own (as the gateway is). One stand-in upstream behind both (graystack.local.standin): a
JSON answer, and a chat stream of 16 content chunks (`"stream": true`). Requests go one at a time, in
alternating blocks, so drift on this shared box hits both alike; each Envoy's CPU (utime + stime from
/proc) is read around its own blocks. Last, the receiver's own cost: the entries it received, read again
and again (`answer_from`), as entries per second on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import httpx
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from bench._common import brief, envoy_binary, summarize, write_result
from gateway import names
from gateway.answers.entries import answer_from
from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from gateway.envoy.answer_filter import FILTER_NAME
from gateway.envoy.balancing import load_balancing
from gateway.envoy.bootstrap import BootstrapOptions, build_bootstrap, message_yaml
from gateway.envoy.common import any_proto, duration
from gateway.envoy.resources import ListenerAddress, build_listener, build_load_assignment
from gateway.envoy.routes import build_route_config
from gateway.spec.model import validate_spec
from graystack.local.gateway_stack import INFERENCE_PATH, envoy_argv
from graystack.local.processes import free_port, start_process, wait_until

BODIES = {"json": {}, "stream": {"stream": True}}
VARIANTS = ("baseline", "candidate")
TICKS = os.sysconf("SC_CLK_TCK")


class KeepingReceiver(AnswerReceiver):
    """The gateway's receiver, keeping the entries it read for the throughput run."""

    def __init__(self, store: AnswerStore) -> None:
        super().__init__(store)
        self.entries: list[accesslog_pb2.HTTPAccessLogEntry] = []

    def take(self, entry: accesslog_pb2.HTTPAccessLogEntry, shadow: bool = False) -> None:
        self.entries.append(entry)
        super().take(entry, shadow)


def bootstrap(
    listen: int,
    admin: int,
    upstream: int,
    receiver: int,
    measure: bool,
    routing: dict[str, Any] | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    analysis: dict[str, Any] | None = None,
) -> str:
    """The builders' listener and routes, static, over clusters with the upstream as their one host.
    `routing`: fields over the spec's routing (the default: every request to the baseline); `variants`:
    fields over a variant's (e.g. endpoints of its own, `load_balancing`), balanced as the builders do;
    `analysis`: the spec's (e.g. `quality`, which turns answer capture on)."""
    spec = validate_spec(
        {
            "name": "hop",
            "variants": {
                v: {"endpoints": [f"127.0.0.1:{upstream}"], **(variants or {}).get(v, {})} for v in VARIANTS
            },
            "routing": {
                "header": "X-Client-Type",
                "weights": {"baseline": 100, "candidate": 0},
                **(routing or {}),
            },
            "timeouts": {"request": "10s"},
            "health_check": None,
            **({"analysis": analysis} if analysis is not None else {}),
        }
    )
    listener = build_listener(ListenerAddress("127.0.0.1", listen), spec.routing, spec.analysis.quality)
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    manager.ClearField("rds")
    manager.route_config.CopyFrom(build_route_config(spec))
    if not measure:
        kept = [f for f in manager.http_filters if f.name != FILTER_NAME]
        del manager.http_filters[:]
        manager.http_filters.extend(kept)
        manager.ClearField("access_log")
    listener.filter_chains[0].filters[0].typed_config.CopyFrom(any_proto(manager))
    config: bootstrap_pb2.Bootstrap = build_bootstrap(
        BootstrapOptions(xds_port=receiver, listen=ListenerAddress("127.0.0.1", listen), admin_port=admin)
    )
    config.ClearField("dynamic_resources")
    config.static_resources.listeners.append(listener)
    for cluster, variant in [*((v, v) for v in VARIANTS), (names.models_cluster("baseline"), "baseline")]:
        hosts = spec.variants[variant].endpoints or []
        config.static_resources.clusters.append(
            cluster_pb2.Cluster(
                name=cluster,
                type=cluster_pb2.Cluster.STATIC,
                connect_timeout=duration(1.0),
                load_assignment=build_load_assignment(variant, hosts, cluster),
                **load_balancing(spec.variants[variant].load_balancing),
            )
        )
    return message_yaml(config)


async def receive(port: int) -> KeepingReceiver:
    """`--receive` mode: the receiver on its own gRPC server until SIGTERM."""
    receiver = KeepingReceiver(AnswerStore())
    server = grpc.aio.server()
    receiver.register(server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(grace=1.0)
    return receiver


def answers_200(url: str) -> bool:
    return httpx.get(url).status_code == 200


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


Requests = Callable[
    [int], dict[str, Any]
]  # the i-th request's httpx keyword arguments (its body, its headers)


def interleaved(
    urls: dict[str, str],
    pids: dict[str, int],
    body: dict[str, Any] | Requests,
    n: int,
    block: int,
    warmup: int,
    reference: str = "off",
) -> dict[str, Any]:
    """Each Envoy's latency and CPU over `n` requests, in alternating blocks; `added_ms`: each one's
    quantiles less the `reference` Envoy's."""
    request: Requests = body if callable(body) else (lambda i: {"json": body})
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    cpu = dict.fromkeys(urls, 0.0)
    clients = {name: httpx.Client(base_url=url, timeout=10) for name, url in urls.items()}
    try:
        for client in clients.values():
            for i in range(warmup):
                client.post(INFERENCE_PATH, **request(i)).raise_for_status()
        order = list(urls)
        for b in range(n // block):
            for name in order if b % 2 == 0 else order[::-1]:
                client, before = clients[name], cpu_seconds(pids[name])
                for i in range(block):
                    kwargs = request(b * block + i)
                    started = time.perf_counter()
                    response = client.post(INFERENCE_PATH, **kwargs)
                    response.read()
                    latencies[name].append(time.perf_counter() - started)
                    response.raise_for_status()
                cpu[name] += cpu_seconds(pids[name]) - before
    finally:
        for client in clients.values():
            client.close()
    stats = {name: summarize(values, 1000) for name, values in latencies.items()}
    return {
        **{
            name: {"latency_ms": stats[name], "envoy_cpu_s_per_1000": round(cpu[name] * 1000 / n, 3)}
            for name in urls
        },
        "added_ms": {
            name: {q: round(stats[name][q] - stats[reference][q], 4) for q in ("p50", "p90", "p99", "mean")}
            for name in urls
            if name != reference
        },
    }


Bootstrap = Callable[[int, int, int, int], str]  # (listen, admin, upstream, receiver port) -> Envoy's YAML


def side_by_side(
    prefix: str,
    bootstraps: Mapping[str, Bootstrap],
    request: Callable[[int], dict[str, Any]],
    args: Any,
    reference: str,
) -> dict[str, Any]:
    """Each named configuration in an Envoy of its own, in front of one stand-in upstream, each logging
    its answers to one receiver process; `interleaved`'s results for the same requests through each
    (`args`: n, block, warmup). The harness of bench.cohort_hop and bench.capture_hop."""
    receiver_port, upstream = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix=f"bench-{prefix}-") as workdir:
        logs = Path(workdir)
        processes = []
        try:
            standin = [sys.executable, "-m", "graystack.local.standin", "--name", "baseline"]
            processes.append(start_process("standin", [*standin, "--port", str(upstream)], logs))
            receive = [sys.executable, "-m", "bench.answer_hop", "--receive", str(receiver_port)]
            receiver = start_process("receiver", [*receive, "--out", str(logs / "heard.json")], logs)
            processes.append(receiver)
            wait_until(functools.partial(answers_200, f"http://127.0.0.1:{upstream}/readyz"), 30, "stand-in")
            urls, pids = {}, {}
            for index, (name, make) in enumerate(bootstraps.items()):
                listen, admin = free_port(), free_port()
                path = logs / f"envoy-{index}.yaml"
                path.write_text(make(listen, admin, upstream, receiver_port))
                envoy = start_process(f"envoy-{index}", envoy_argv(envoy_binary(), path), logs)
                processes.append(envoy)
                ready = functools.partial(answers_200, f"http://127.0.0.1:{admin}/ready")
                wait_until(ready, 30, f"Envoy {name}")
                urls[name], pids[name] = f"http://127.0.0.1:{listen}", envoy.pid
            results = interleaved(urls, pids, request, args.n, args.block, args.warmup, reference=reference)
            receiver.popen.send_signal(signal.SIGTERM)
        finally:
            for process in processes:
                process.stop()
    return results


def receiver_rate(entries: list[accesslog_pb2.HTTPAccessLogEntry], seconds: float = 2.0) -> float:
    """Entries per second `answer_from` reads on one core (the receiver's work per entry)."""
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for entry in entries:
            answer_from(entry)
        done += len(entries)
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="requests per Envoy and body")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--receive", type=int, help=argparse.SUPPRESS)  # the receiver's own process
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receive:  # then its count, and how fast it reads entries, go to --out as JSON
        heard = asyncio.run(receive(args.receive))
        rate = receiver_rate(heard.entries[-2000:]) if heard.entries else 0.0
        kept = heard.store.counts.kept
        args.out.write_text(json.dumps({"kept": kept, "entries_per_second_one_core": round(rate)}))
        return
    receiver_port, upstream = free_port(), free_port()
    processes = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-answer-hop-") as workdir:
        logs = Path(workdir)
        try:
            argv = [
                sys.executable,
                "-m",
                "graystack.local.standin",
                "--name",
                "baseline",
                "--port",
                str(upstream),
            ]
            processes.append(start_process("standin", argv, logs))
            counted = logs / "receiver.json"
            receiver_argv = [
                sys.executable,
                "-m",
                "bench.answer_hop",
                "--receive",
                str(receiver_port),
                "--out",
                str(counted),
            ]
            receiver = start_process("receiver", receiver_argv, logs)
            urls, pids = {}, {}
            standin = f"http://127.0.0.1:{upstream}/readyz"
            wait_until(functools.partial(answers_200, standin), 30, "the stand-in")
            admins = {}
            for name in ("on", "off"):
                listen, admin = free_port(), free_port()
                admins[name] = f"http://127.0.0.1:{admin}/ready"
                path = logs / f"envoy-{name}.yaml"
                path.write_text(bootstrap(listen, admin, upstream, receiver_port, measure=name == "on"))
                envoy = start_process(f"envoy-{name}", envoy_argv(envoy_binary(), path), logs)
                processes.append(envoy)
                urls[name], pids[name] = f"http://127.0.0.1:{listen}", envoy.pid
            for name, ready in admins.items():
                wait_until(functools.partial(answers_200, ready), 30, f"Envoy {name}")
            receiver_cpu = cpu_seconds(receiver.pid)
            for kind, body in BODIES.items():
                results[kind] = interleaved(urls, pids, body, args.n, args.block, args.warmup)
                for name in ("on", "off"):
                    print(
                        f"{kind:6s} measure {name:3s}: {brief(results[kind][name]['latency_ms'])}  "
                        f"Envoy CPU {results[kind][name]['envoy_cpu_s_per_1000']} s/1000 req"
                    )
                print(f"{kind:6s} added: {results[kind]['added_ms']}")
            time.sleep(2.5)  # the last flush
            receiver_cpu = cpu_seconds(receiver.pid) - receiver_cpu
            os.kill(receiver.pid, signal.SIGTERM)
            receiver.popen.wait(timeout=60)
            heard = json.loads(counted.read_text())
        finally:
            for process in [*processes, receiver]:
                process.stop()
    results["receiver"] = {
        "answers_kept": heard["kept"],
        "requests_through_the_measuring_envoy": len(BODIES) * (args.n + args.warmup),
        "cpu_s_per_1000_answers": round(receiver_cpu * 1000 / max(heard["kept"], 1), 3),
        "entries_per_second_one_core": heard["entries_per_second_one_core"],
    }
    print(f"receiver: {results['receiver']}")
    path = write_result(
        "answer_hop",
        {
            "requests_per_envoy_and_body": args.n,
            "block": args.block,
            "warmup": args.warmup,
            "path": INFERENCE_PATH,
            "bodies": BODIES,
            "streamed_tokens": 16,
            "envoy_concurrency": 2,
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
