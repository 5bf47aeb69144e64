"""What the Endpoint Picker costs (issue 37): the same GIE data plane on the real Envoy 1.40
(tests/support/gie_data_plane.py) with the picker and without it, side by side in one run.

Four Envoys over the same two pods (one loopback address each, as GIE's conformance treats an IP as a
pod): `bare`, the override_host shape with the ext_proc filter removed (no pick: the cluster's round robin
serves); `override_host` and `original_dst`, each with ext_proc in FULL_DUPLEX_STREAMED mode (request and
response bodies) as GIE gateways configure it; and `answer_unseen`, override_host with the answer's body
and trailers not sent to the picker (what is left if measurement moves to the access log). All three call
ONE `graystack epp --insecure` process of its own (so its CPU, utime + stime from /proc, is its own). The
pods are one raw-asyncio process here (`--serve-pods`) that answers at once: a small JSON answer, or an
SSE stream of N events of ~100 B each, each stamped with the pod's `time.monotonic()` when written, so
the client (same clock) reads every chunk's delivery time through the hop.

Phases, each alternating blocks across the targets so drift on this shared box hits all alike:
  1. latency: small non-streamed POSTs at a fixed open-loop rate (default 100/s), p50/p99 per target;
  2. streams: SSE streams at a fixed rate, chunks spaced by a gap (an LLM's inter-token time, shortened):
     time to last byte, and each chunk's delivery time (pod write -> client read); then the same streams
     written back to back (no gap), which Envoy may read as fewer body messages;
  3. capacity: closed loop, as hard as the client drives it (plain requests, then spaced streams): the
     rate served and the picker's CPU seconds, hence requests and chunks per picker CPU-second;
and first, in this process, the picker's servicer alone (gateway/epp/service.py walking one plain
request's messages, parsed and answered as bytes, no gRPC transport): what the pick itself costs.
The ext_proc messages the picker took are Envoy's own counts (`http.gateway.ext_proc.stream_msgs_*`).
The client (httpx.AsyncClient, one connection per worker) runs in this process: its CPU is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import yaml
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc_pb2

from bench._common import brief, envoy_binary, summarize, write_result
from gateway.epp.picker import Picker
from gateway.epp.service import ExtProc
from gateway.epp.wanted import Wanted
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from tests.support.gie_data_plane import DataPlane, PickerAddress

TICKS = os.sysconf("SC_CLK_TCK")
PODS = ("127.0.8.2", "127.0.8.3")
PATH = "/v1/completions"
BODY = b'{"model": "m", "prompt": "Write as if you were a critic: San Francisco", "max_tokens": 16}'
ANSWER = b'{"id":"c-1","object":"text_completion","model":"m","choices":[{"index":0,"text":"ok"}]}'
EVENT_SIZE = 100  # bytes per SSE event, padding included


# ---- the pods: one process, one listener per address, answering at once ----


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return
    length = int(headers.get("content-length", "0"))
    if length:
        await reader.readexactly(length)


def _event(index: int) -> bytes:
    data = b"data: " + json.dumps({"i": index, "t": time.monotonic()}).encode()
    data = data + b" " * max(0, EVENT_SIZE - len(data) - 2) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _pod(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            if not line.strip():
                continue
            headers: dict[str, str] = {}
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = header.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            await _read_body(reader, headers)
            chunks = int(headers.get("x-chunks", "0"))
            if not chunks:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(ANSWER), ANSWER)
                )
                await writer.drain()
                continue
            gap = float(headers.get("x-gap-ms", "0")) / 1000
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for index in range(chunks):
                writer.write(_event(index))
                await writer.drain()
                if gap:
                    await asyncio.sleep(gap)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve_pods(port: int) -> None:
    servers = [await asyncio.start_server(_pod, host, port) for host in PODS]
    await asyncio.gather(*(server.serve_forever() for server in servers))


# ---- measuring ----


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def ext_proc_messages(admin_port: int) -> dict[str, int]:
    """Envoy's ext_proc counters: streams started, messages sent to the picker and received from it."""
    text = httpx.get(f"http://127.0.0.1:{admin_port}/stats?filter=ext_proc", timeout=5).text
    counts = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if name.endswith(("streams_started", "stream_msgs_sent", "stream_msgs_received")):
            counts[name.rsplit(".", 1)[1]] = int(value)
    return counts


def _check(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"unexpected answer: {response.status_code} {response.text[:200]}")


async def plain(client: httpx.AsyncClient, sink: list[float]) -> None:
    started = time.perf_counter()
    response = await client.post(PATH, content=BODY)
    sink.append(time.perf_counter() - started)
    _check(response)


async def stream(
    client: httpx.AsyncClient, chunks: int, gap_ms: float, ttlb: list[float], delivery: list[float]
) -> None:
    """One SSE stream: its time to last byte, and each event's delivery (pod write -> read here)."""
    headers = {"x-chunks": str(chunks), "x-gap-ms": str(gap_ms), "content-type": "application/json"}
    started = time.perf_counter()
    seen, buffer = 0, b""
    async with client.stream("POST", PATH, content=BODY, headers=headers) as response:
        _check(response)
        async for raw in response.aiter_raw():
            now = time.monotonic()
            buffer += raw
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                delivery.append(now - json.loads(event.removeprefix(b"data: "))["t"])
                seen += 1
    ttlb.append(time.perf_counter() - started)
    if seen != chunks:
        raise RuntimeError(f"{seen} of {chunks} events arrived")


async def open_loop(rate: float, count: int, one: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """`count` calls of `one`, started at `rate` per second whatever the answers' pace."""
    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)


class Target:
    def __init__(self, name: str, plane: DataPlane, picked: bool) -> None:
        self.name, self.plane, self.picked = name, plane, picked
        self.client = httpx.AsyncClient(base_url=plane.url, timeout=30)
        self.workers = [self.client]

    async def workers_for(self, n: int) -> list[httpx.AsyncClient]:
        while len(self.workers) < n:
            self.workers.append(httpx.AsyncClient(base_url=self.plane.url, timeout=30))
        await asyncio.gather(*(plain(c, []) for c in self.workers[:n]))  # connections open
        return self.workers[:n]

    async def close(self) -> None:
        for client in self.workers:
            await client.aclose()


class Meter:
    """CPU seconds of the picker, the Envoys, the pods and this client, and the picker's messages."""

    def __init__(self, picker: ManagedProcess, pods: ManagedProcess, targets: list[Target]) -> None:
        self.picker, self.pods, self.targets = picker, pods, targets

    def read(self, target: Target) -> dict[str, float]:
        messages = ext_proc_messages(target.plane.admin_port) if target.picked else {}
        assert target.plane.process is not None
        return {
            "picker_cpu_s": cpu_seconds(self.picker.pid),
            "envoy_cpu_s": cpu_seconds(target.plane.process.pid),
            "pods_cpu_s": cpu_seconds(self.pods.pid),
            "client_cpu_s": time.process_time(),
            "wall_s": time.perf_counter(),
            **{k: float(v) for k, v in messages.items()},
        }


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


async def alternate(
    targets: list[Target], meter: Meter, blocks: int, block: Callable[[Target, int], Awaitable[None]]
) -> dict[str, dict[str, float]]:
    """`blocks` rounds, each running `block` on every target in turn (the order rotating each round);
    the resources each target's blocks spent, summed."""
    totals: dict[str, dict[str, float]] = {t.name: {} for t in targets}
    for b in range(blocks):
        order = targets[b % len(targets) :] + targets[: b % len(targets)]
        for target in order:
            before = meter.read(target)
            await block(target, b)
            for k, v in spent(before, meter.read(target)).items():
                totals[target.name][k] = totals[target.name].get(k, 0.0) + v
    return totals


def per_second(use: dict[str, float], count: int, chunks_each: int = 0) -> dict[str, Any]:
    wall = use["wall_s"]
    out: dict[str, Any] = {
        "requests": count,
        "wall_s": round(wall, 2),
        "requests_per_s": round(count / wall, 1),
        "cpu_share": {
            k.removesuffix("_cpu_s"): round(v / wall, 3) for k, v in use.items() if k.endswith("_cpu_s")
        },
        "client_cpu_ms_per_request": round(1000 * use["client_cpu_s"] / count, 3),
    }
    if chunks_each:
        out["chunks_per_s"] = round(count * chunks_each / wall, 1)
    if "stream_msgs_sent" in use:
        picker_cpu = use["picker_cpu_s"]
        msgs = use["stream_msgs_sent"]
        out |= {
            "picker_cpu_s": round(picker_cpu, 3),
            "picker_messages_per_request": round(msgs / count, 2),
            "picker_us_per_request": round(1e6 * picker_cpu / count, 1),
            "picker_us_per_message": round(1e6 * picker_cpu / msgs, 1) if msgs else None,
            "requests_per_picker_cpu_s": round(count / picker_cpu, 1) if picker_cpu else None,
            "messages_per_picker_cpu_s": round(msgs / picker_cpu, 1) if picker_cpu else None,
        }
    return out


def differences(stats: dict[str, dict[str, float]], base: str) -> dict[str, dict[str, float]]:
    return {
        name: {q: round(s[q] - stats[base][q], 4) for q in ("p50", "p90", "p99", "mean")}
        for name, s in stats.items()
        if name != base
    }


async def stream_phase(
    args: argparse.Namespace, targets: list[Target], meter: Meter, gap: float, rate: float
) -> dict[str, Any]:
    """`args.streams` SSE streams per target, started at `rate` per second, events `gap` ms apart."""
    names = [t.name for t in targets]
    ttlb: dict[str, list[float]] = {n: [] for n in names}
    delivery: dict[str, list[float]] = {n: [] for n in names}
    blocks = max(1, args.blocks // 2)

    async def block(target: Target, _: int) -> None:
        await open_loop(
            rate,
            args.streams // blocks,
            lambda: stream(target.client, args.chunks, gap, ttlb[target.name], delivery[target.name]),
        )

    use = await alternate(targets, meter, blocks, block)
    ttlb_stats = {n: summarize(ttlb[n], 1000) for n in names}
    delivery_stats = {n: summarize(delivery[n], 1000) for n in names}
    label = "spaced" if gap else "burst"
    for n in names:
        print(f"streams {label} {n:14s} last byte {brief(ttlb_stats[n])}", flush=True)
        print(f"streams {label} {n:14s} chunk     {brief(delivery_stats[n])}", flush=True)
    return {
        "gap_ms": gap,
        "streams_per_s": rate,
        "time_to_last_byte_ms": ttlb_stats,
        "ttlb_added_ms_vs_bare": differences(ttlb_stats, "bare"),
        "chunk_delivery_ms": delivery_stats,
        "chunk_delivery_added_ms_vs_bare": differences(delivery_stats, "bare"),
        "resources": {n: per_second(use[n], len(ttlb[n]), args.chunks) for n in names},
    }


async def capacity_phase(
    args: argparse.Namespace, targets: list[Target], meter: Meter, concurrency: int, chunks: int
) -> dict[str, Any]:
    """`concurrency` workers, each a request after the last (streams of `chunks` events when non-zero),
    for `args.capacity_seconds` per target in two alternating blocks. The connection-opening requests
    of workers_for are counted too: few, and they went through."""
    names = [t.name for t in targets]
    counts = dict.fromkeys(names, 0)
    latencies: dict[str, list[float]] = {n: [] for n in names}
    delivery: dict[str, list[float]] = {n: [] for n in names}

    async def block(target: Target, _: int) -> None:
        clients = await target.workers_for(concurrency)
        counts[target.name] += len(clients)
        deadline = time.perf_counter() + args.capacity_seconds / 2

        async def worker(client: httpx.AsyncClient) -> None:
            while time.perf_counter() < deadline:
                if chunks:
                    await stream(client, chunks, args.gap_ms, latencies[target.name], delivery[target.name])
                else:
                    await plain(client, latencies[target.name])
                counts[target.name] += 1

        await asyncio.gather(*(worker(c) for c in clients))

    use = await alternate(targets, meter, 2, block)
    results: dict[str, Any] = {"concurrency": concurrency, "chunks": chunks}
    for n in names:
        results[n] = {
            **per_second(use[n], counts[n], chunks),
            "latency_ms": summarize(latencies[n], 1000),
            **({"chunk_delivery_ms": summarize(delivery[n], 1000)} if chunks else {}),
        }
        print(f"capacity {'streams' if chunks else 'plain'} {n:14s} {json.dumps(results[n])}", flush=True)
    return results


async def measure(args: argparse.Namespace, targets: list[Target], meter: Meter) -> dict[str, Any]:
    results: dict[str, Any] = {"servicer_alone": await servicer_alone(20000)}
    print(f"the servicer without gRPC: {json.dumps(results['servicer_alone'])}", flush=True)
    names = [t.name for t in targets]
    for target in targets:  # warm every path
        await asyncio.gather(*(plain(target.client, []) for _ in range(50)))
        await stream(target.client, args.chunks, 0, [], [])

    # 1. latency at a fixed rate
    latency: dict[str, list[float]] = {n: [] for n in names}
    per_block = args.n // args.blocks

    async def latency_block(target: Target, _: int) -> None:
        await open_loop(args.rate, per_block, lambda: plain(target.client, latency[target.name]))

    use = await alternate(targets, meter, args.blocks, latency_block)
    stats = {n: summarize(latency[n], 1000) for n in names}
    results["latency"] = {
        "ms": stats,
        "added_ms_vs_bare": differences(stats, "bare"),
        "resources": {n: per_second(use[n], len(latency[n])) for n in names},
    }
    for n in names:
        print(f"latency {n:14s} {brief(stats[n])}", flush=True)

    # 2. streams: spaced (chunk delivery), then back to back
    results["streams_spaced"] = await stream_phase(args, targets, meter, args.gap_ms, args.stream_rate)
    results["streams_burst"] = await stream_phase(args, targets, meter, 0.0, args.stream_rate * 2)

    # 3. capacity: closed loop, as hard as the client drives it (all but original_dst)
    capacity_targets = [t for t in targets if t.name != "original_dst"]
    results["capacity_plain"] = await capacity_phase(args, capacity_targets, meter, args.concurrency, 0)
    results["capacity_streams"] = await capacity_phase(
        args, capacity_targets, meter, args.stream_concurrency, args.chunks
    )

    # the picker's cost per chunk: what a streamed request costs beyond a plain one, per extra message
    plain_cap, stream_cap = (
        results["capacity_plain"]["override_host"],
        results["capacity_streams"]["override_host"],
    )
    extra_us = stream_cap["picker_us_per_request"] - plain_cap["picker_us_per_request"]
    extra_msgs = stream_cap["picker_messages_per_request"] - plain_cap["picker_messages_per_request"]
    per_chunk = extra_us / extra_msgs if extra_msgs > 0 else None
    results["picker_one_core"] = {
        "requests_per_cpu_s": plain_cap["requests_per_picker_cpu_s"],
        "us_per_plain_request": plain_cap["picker_us_per_request"],
        "messages_per_plain_request": plain_cap["picker_messages_per_request"],
        "us_per_extra_chunk": round(per_chunk, 1) if per_chunk else None,
        "chunks_per_cpu_s": round(1e6 / per_chunk) if per_chunk else None,
        "streams_of_n_chunks_per_cpu_s": stream_cap["requests_per_picker_cpu_s"],
    }
    print(f"picker, one core: {json.dumps(results['picker_one_core'])}", flush=True)
    return results


async def servicer_alone(rounds: int) -> dict[str, float]:
    """The picker's own Python for one plain request, without gRPC's transport: the messages Envoy sends
    (parsed from bytes), walked by the ext_proc servicer (the pick, the echo), its answers serialized."""
    pods = {"baseline": tuple(f"{host}:8000" for host in PODS)}
    picker = Picker(lambda: Wanted(pods=pods, weights={"baseline": 100}, baseline="baseline"))
    service = ExtProc(picker)
    header_list = [("host", "127.0.0.1"), (":method", "POST"), (":path", PATH), (":scheme", "http")]
    header_list += [("content-type", "application/json"), ("user-agent", "python-httpx"), ("accept", "*/*")]
    headers = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in header_list]
    )
    wire = [
        m.SerializeToString()
        for m in (
            ext_proc_pb2.ProcessingRequest(request_headers=ext_proc_pb2.HttpHeaders(headers=headers)),
            ext_proc_pb2.ProcessingRequest(request_body=ext_proc_pb2.HttpBody(body=BODY, end_of_stream=True)),
            ext_proc_pb2.ProcessingRequest(response_headers=ext_proc_pb2.HttpHeaders(headers=headers)),
            ext_proc_pb2.ProcessingRequest(
                response_body=ext_proc_pb2.HttpBody(body=ANSWER, end_of_stream=True)
            ),
        )
    ]

    async def messages() -> AsyncIterator[ext_proc_pb2.ProcessingRequest]:
        for data in wire:
            yield ext_proc_pb2.ProcessingRequest.FromString(data)

    started = time.process_time()
    for _ in range(rounds):
        async for answer in service.Process(messages(), None):
            answer.SerializeToString()
    per_request = (time.process_time() - started) / rounds
    return {
        "us_per_request": round(1e6 * per_request, 1),
        "messages_per_request": len(wire),
        "us_per_message": round(1e6 * per_request / len(wire), 1),
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    envoy = envoy_binary()
    port, picker_port, health_port = free_port(), free_port(), free_port()
    pods_list = [f"{host}:{port}" for host in PODS]
    pods = start_process("pods", [sys.executable, "-m", "bench.epp_cost", "--serve-pods", str(port)], workdir)
    picker_argv = [sys.executable, "-m", "graystack", "epp", "--insecure", "--log-level", "warning"]
    picker_argv += ["--port", str(picker_port), "--health-port", str(health_port)]
    picker_argv += ["--pods", "baseline=" + ",".join(pods_list), "--split", "baseline=100"]
    picker = start_process("epp", picker_argv, workdir)
    planes: list[tuple[str, DataPlane, bool]] = []
    targets: list[Target] = []
    try:
        wait_until(
            lambda: httpx.post(f"http://{pods_list[0]}{PATH}", content=BODY).status_code == 200, 30, "pods"
        )
        address = PickerAddress(picker_port)
        (workdir / "bare").mkdir()
        bare = DataPlane(envoy, workdir / "bare", "override_host", address, pods_list)
        config = yaml.safe_load(bare.config.read_text())
        manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        manager["http_filters"] = [
            f for f in manager["http_filters"] if f["name"] != "envoy.filters.http.ext_proc"
        ]
        bare.config.write_text(yaml.safe_dump(config, sort_keys=False))
        planes.append(("bare", bare, False))
        planes.append(("override_host", DataPlane(envoy, workdir, "override_host", address, pods_list), True))
        planes.append(("original_dst", DataPlane(envoy, workdir, "original_dst", address, pods_list), True))
        (workdir / "headers_only").mkdir()
        headers_only = DataPlane(envoy, workdir / "headers_only", "override_host", address, pods_list)
        config = yaml.safe_load(headers_only.config.read_text())
        manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        for http_filter in manager["http_filters"]:
            if http_filter["name"] == "envoy.filters.http.ext_proc":
                mode = http_filter["typed_config"]["processing_mode"]
                mode |= {"response_body_mode": "NONE", "response_trailer_mode": "SKIP"}
        headers_only.config.write_text(yaml.safe_dump(config, sort_keys=False))
        planes.append(("answer_unseen", headers_only, True))
        for _, plane, _ in planes:
            plane.start()
        targets = [Target(name, plane, picked) for name, plane, picked in planes]
        return await measure(args, targets, Meter(picker, pods, targets))
    finally:
        for target in targets:
            await target.close()
        for _, plane, _ in planes:
            plane.stop()
        picker.stop()
        pods.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve-pods", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("-n", type=int, default=1500, help="plain requests per target, latency phase")
    parser.add_argument("--rate", type=float, default=100, help="plain requests per second, latency phase")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks per phase")
    parser.add_argument("--chunks", type=int, default=50, help="SSE events per stream")
    parser.add_argument("--gap-ms", type=float, default=2.0, help="between a stream's events (spaced)")
    parser.add_argument("--streams", type=int, default=150, help="streams per target, per stream phase")
    parser.add_argument("--stream-rate", type=float, default=10, help="streams started per second")
    parser.add_argument("--concurrency", type=int, default=16, help="closed-loop workers, plain capacity")
    parser.add_argument("--stream-concurrency", type=int, default=16, help="closed-loop workers, streams")
    parser.add_argument("--capacity-seconds", type=float, default=10, help="per target, per capacity phase")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/epp_cost.json")
    args = parser.parse_args()
    if args.serve_pods is not None:
        asyncio.run(serve_pods(args.serve_pods))
        return
    with tempfile.TemporaryDirectory(prefix="bench-epp-") as workdir:
        results = asyncio.run(run(args, Path(workdir)))
    parameters = {k: v for k, v in vars(args).items() if k not in ("serve_pods", "out")}
    parameters |= {
        "pods": len(PODS),
        "event_bytes": EVENT_SIZE,
        "picker": "graystack epp --insecure, its own process, one variant of both pods (split baseline=100)",
        "bare": "the override_host data plane without its ext_proc filter (the cluster's round robin)",
        "client": "httpx.AsyncClient in the bench process; one connection per closed-loop worker",
    }
    print(f"wrote {write_result('epp_cost', parameters, results, args.out)}")


if __name__ == "__main__":
    main()
