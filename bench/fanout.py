"""Fan-out: one split change pushed to 100 and 1,000 ADS streams, and what the control plane holds in memory.

The control plane runs in this process (gateway.app.GatewayProcess), so the bench can call
`gateway.set_split` and `ads.wait_converged` directly and read its own RSS from /proc. The proxies are
lightweight grpc.aio clients in separate processes (`--role client`), each speaking SotW ADS the way
Envoy does: wildcard CDS and LDS, then EDS for the EDS clusters CDS named and RDS for the route config
LDS named, ACKing every response. Streams share channels (50 per channel, separate TCP connections).

Per N: initial sync (clients told to go -> every stream ACKed everything), then `--flips` split changes,
each timed from `set_split` (which builds N snapshots) to the last ACK. Reference
(docs/architecture.md, "Reference measurements"): 1 / 10 / 30 real Envoys, push -> all ACKs p50 2.2 / 4.7 /
9.6 ms; initial sync 0.07 / 0.36 / 0.85 s; control-plane peak RSS 48 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import yaml
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from prometheus_client import REGISTRY

from bench._common import rss_kib, summarize, write_result
from gateway.app import GatewayOptions, GatewayProcess
from gateway.families import XDS_CONNECTED_PROXIES
from gateway.local import local_gateway
from gateway.xds import types
from graystack.local.gateway_stack import default_spec
from graystack.local.processes import free_port

SYNC_TIMEOUT_S = 120.0
FLIP_TIMEOUT_S = 60.0

# -- the fake proxy (client processes) ------------------------------------------------------------


def eds_names(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    names = []
    for packed in response.resources:
        cluster = cluster_pb2.Cluster()
        packed.Unpack(cluster)
        if cluster.type == cluster_pb2.Cluster.EDS:
            names.append(cluster.eds_cluster_config.service_name or cluster.name)
    return sorted(names)


def rds_names(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    names = set()
    for packed in response.resources:
        listener = listener_pb2.Listener()
        packed.Unpack(listener)
        for chain in listener.filter_chains:
            for network_filter in chain.filters:
                manager = hcm_pb2.HttpConnectionManager()
                if network_filter.typed_config.Unpack(manager) and manager.HasField("rds"):
                    names.add(manager.rds.route_config_name)
    return sorted(names)


async def fake_proxy(stub: ads_pb2_grpc.AggregatedDiscoveryServiceStub, node_id: str) -> None:
    """One ADS stream that subscribes and ACKs like Envoy, until the process is stopped."""
    queue: asyncio.Queue[discovery_pb2.DiscoveryRequest] = asyncio.Queue()

    async def requests() -> AsyncIterator[discovery_pb2.DiscoveryRequest]:
        while True:
            yield await queue.get()

    node = base_pb2.Node(id=node_id, cluster="bench-fanout")
    node.metadata.update({"graystack": {"listen_address": "127.0.0.1", "listen_port": "8080"}})
    queue.put_nowait(discovery_pb2.DiscoveryRequest(node=node, type_url=types.CLUSTER))
    queue.put_nowait(discovery_pb2.DiscoveryRequest(type_url=types.LISTENER))
    subscribed: dict[str, list[str]] = {types.CLUSTER: [], types.LISTENER: []}
    dependent = {types.CLUSTER: (types.ENDPOINT, eds_names), types.LISTENER: (types.ROUTE, rds_names)}
    async for response in stub.StreamAggregatedResources(requests()):
        if response.type_url in dependent:  # like Envoy: ask for what this names, then ACK it
            type_url, names_of = dependent[response.type_url]
            names = names_of(response)
            if names != subscribed.get(type_url):
                subscribed[type_url] = names
                queue.put_nowait(discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=names))
        queue.put_nowait(
            discovery_pb2.DiscoveryRequest(
                version_info=response.version_info,
                response_nonce=response.nonce,
                type_url=response.type_url,
                resource_names=subscribed[response.type_url],
            )
        )


async def run_clients(port: int, first: int, count: int, per_channel: int) -> None:
    """Open the channels, say `ready`, wait for `go` on stdin, then run `count` streams."""
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(math.ceil(count / per_channel))
    ]
    await asyncio.gather(*(channel.channel_ready() for channel in channels))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    stubs = [ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel) for channel in channels]
    await asyncio.gather(
        *(fake_proxy(stubs[i // per_channel], f"bench-proxy-{first + i}") for i in range(count))
    )


# -- the control plane side (this process) --------------------------------------------------------


def connected() -> int:
    return int(REGISTRY.get_sample_value(XDS_CONNECTED_PROXIES) or 0)


def reset_peak_rss() -> bool:
    """Reset VmHWM (Linux >= 4.0) so each N's peak is its own; False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def wait_all_converged(process: GatewayProcess, n: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while connected() < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {connected()} of {n} streams connected")
        await asyncio.sleep(0.002)
    if not await process.ads.wait_converged(deadline - time.monotonic()):
        raise TimeoutError("streams did not converge (timeout or NACK)")


async def start_clients(
    clients: list[asyncio.subprocess.Process], port: int, n: int, per_process: int, per_channel: int
) -> None:
    """Spawn client processes into `clients` (so the caller can stop them even on failure); wait for ready."""
    for first in range(0, n, per_process):
        clients.append(
            await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "bench.fanout", "--role", "client", "--xds-port", str(port)),
                *("--first", str(first), "--count", str(min(per_process, n - first))),
                *("--per-channel", str(per_channel)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        )
    for client in clients:
        assert client.stdout is not None  # stdout=PIPE
        line = await asyncio.wait_for(client.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"client {client.pid} did not get ready: {line!r}")


async def stop_clients(clients: list[asyncio.subprocess.Process]) -> None:
    for client in clients:
        if client.returncode is None:
            client.terminate()
    for client in clients:
        try:
            await asyncio.wait_for(client.wait(), 10)
        except TimeoutError:
            client.kill()
            await client.wait()


class PendingTaskCounter:
    """Counts asyncio's 'Task was destroyed but it is pending!' reports instead of printing each one.

    Seen when fake proxies are stopped: see `leaked_pending_tasks` in the results.
    """

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == "Task was destroyed but it is pending!":
            self.count += 1
        else:
            loop.default_exception_handler(context)


PENDING = PendingTaskCounter()


async def measure(n: int, flips: int, per_process: int, per_channel: int, workdir: Path) -> dict[str, Any]:
    spec_path = workdir / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(default_spec(free_port(), free_port()), sort_keys=False))
    process = local_gateway(GatewayOptions(spec=spec_path, xds_port=free_port(), admin_port=free_port()))
    await process.start()
    leaked = PENDING.count
    clients: list[asyncio.subprocess.Process] = []
    try:
        gc.collect()
        peak_reset = reset_peak_rss()
        before = rss_kib()
        await start_clients(clients, process.options.xds_port, n, per_process, per_channel)
        started = time.perf_counter()
        for client in clients:
            assert client.stdin is not None  # stdin=PIPE
            client.stdin.write(b"go\n")
            await client.stdin.drain()
        await wait_all_converged(process, n, SYNC_TIMEOUT_S)
        initial_sync = time.perf_counter() - started
        after_connect = rss_kib()
        streams = process.ads.streams()
        if len(streams) != n or any(len(s.types) != 4 for s in streams):
            raise RuntimeError("a stream is missing, or did not subscribe to all four types")

        totals, set_split_s = [], []
        for i in range(flips):
            target = ("zero-layer", "baseline")[i % 2]
            started = time.perf_counter()
            process.gateway.set_split({target: 100})
            set_split_s.append(time.perf_counter() - started)
            if not await process.ads.wait_converged(FLIP_TIMEOUT_S):
                raise TimeoutError(f"flip {i} to {target}: not every stream ACKed")
            totals.append(time.perf_counter() - started)
            await asyncio.sleep(0.2)
        peak = rss_kib()["VmHWM"]
    finally:
        await stop_clients(clients)
        await process.stop()
    gc.collect()  # tasks orphaned by closed streams are reported now, not during the next run
    await asyncio.sleep(0)
    return {
        "streams": n,
        "client_processes": len(clients),
        "initial_sync_s": round(initial_sync, 4),
        "flip_to_all_acked_ms": summarize(totals, 1000),
        "set_split_ms": summarize(set_split_s, 1000),
        "push_to_all_acked_ms": summarize([t - s for t, s in zip(totals, set_split_s, strict=True)], 1000),
        "rss_mib": {
            "before_connect": round(before["VmRSS"] / 1024, 1),
            "after_connect": round(after_connect["VmRSS"] / 1024, 1),
            "peak": round(peak / 1024, 1),
            "peak_is_per_run": peak_reset,
        },
        "leaked_pending_tasks": PENDING.count - leaked,
    }


async def run_bench(args: argparse.Namespace) -> None:
    asyncio.get_running_loop().set_exception_handler(PENDING)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as workdir:
        for n in args.streams:
            run = await measure(n, args.flips, args.per_process, args.per_channel, Path(workdir))
            runs.append(run)
            rss = run["rss_mib"]
            print(f"N={n:5d}  initial sync {run['initial_sync_s']:.3f} s")
            flip, split = run["flip_to_all_acked_ms"], run["set_split_ms"]
            print(
                f"         flip -> all ACKed  p50 {flip['p50']:.1f} ms  max {flip['max']:.1f} ms  (n={flip['n']})"
            )
            print(f"         of which set_split p50 {split['p50']:.1f} ms  max {split['max']:.1f} ms")
            print(
                f"         control-plane RSS {rss['before_connect']} MiB before, "
                f"{rss['after_connect']} MiB connected, {rss['peak']} MiB peak"
            )
    path = write_result(
        "fanout",
        {
            "streams": args.streams,
            "flips_per_n": args.flips,
            "streams_per_client_process": args.per_process,
            "streams_per_channel": args.per_channel,
            "control_plane": "in-process GatewayProcess (grpc.aio SotW ADS); clients: grpc.aio fake proxies",
            "note": "flip time is set_split() (builds N per-node snapshots) + push + every stream's RDS ACK; "
            "the fake proxies share the CPUs with the control plane",
        },
        {"runs": runs},
    )
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--flips", type=int, default=10, help="split changes per N")
    parser.add_argument("--per-process", type=int, default=500, help="streams per client process")
    parser.add_argument("--per-channel", type=int, default=50, help="streams per gRPC channel")
    parser.add_argument("--role", choices=["bench", "client"], default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--xds-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "client":
        asyncio.run(run_clients(args.xds_port, args.first, args.count, args.per_channel))
    else:
        asyncio.run(run_bench(args))


if __name__ == "__main__":
    main()
