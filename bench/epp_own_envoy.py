"""What asking the Endpoint Picker costs graystack's own Envoy (the spec's `envoy_picker`, issue 37):
the same Envoy, programmed by the real gateway, with and without the picker, in alternating blocks.

One local stack (graystack/local/gateway_stack.py: the gateway, the real Envoy 1.40) routes to two pods
(bench/epp_cost.py's raw-asyncio pods, one loopback address each, answering at once), both the
baseline's; the split sends everything there. `graystack epp --insecure` runs as a process of its own,
knowing those pods. Blocks alternate between two specs, written and converged between blocks: `bare`
(no `envoy_picker`: the cluster's round robin) and `picked` (`envoy_picker`: ext_proc with the request's
and the answer's headers, gateway/envoy/picking.py). A third target, `served`, is a second stack alike
whose gateway serves the picker itself (`envoy_picker.serve`, gateway/epp/envoys.py: asked by ext_authz
over HTTP/1.1, gateway/envoy/picker_checks.py; its socket is bound as the gateway starts, so it has its
own stack), in the same rotation. Each block opens its own
connection, since one opened before a listener change keeps the old filters until it drains. A request is
bench/epp_cost.py's small non-streamed POST, sent at a fixed open-loop rate; the client (httpx) runs in
this process."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench._common import brief, envoy_binary, summarize, write_result
from bench.epp_cost import BODY, PATH, PODS, ext_proc_messages, open_loop, plain
from graystack.local.gateway_stack import GatewayStack, Running, default_spec
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until

TARGETS = ("bare", "picked", "served")


def pinned(spec: dict[str, Any], pods: list[str]) -> dict[str, Any]:
    """`spec` with both pods the baseline's (the other variant on one, weighted 0), no fallback."""
    spec["variants"] = {
        "baseline": {"endpoints": pods, "health_check": None},
        "zero-layer": {"endpoints": pods[1:], "health_check": None},
    }
    spec["routing"]["weights"] = {"baseline": 100, "zero-layer": 0}
    spec["retries"]["fallback"] = None
    return spec


def spec_for(stack: GatewayStack, pods: list[str], picker_port: int, picked: bool) -> dict[str, Any]:
    """The stack's spec with both pods the baseline's, and the picker asked where `picked`."""
    spec = pinned(stack.spec, pods)
    spec.pop("envoy_picker", None)
    if picked:
        spec["envoy_picker"] = {"host": "127.0.0.1", "port": picker_port, "tls": False}
    return spec


async def block(
    stack: GatewayStack, spec: dict[str, Any] | None, rate: float, n: int, sink: list[float]
) -> None:
    """`n` requests at `rate` through `stack`, after writing `spec` there (None: its spec as it is)."""
    if spec is not None:
        generation = stack.status()["generation"]
        stack.write_spec(spec)
        stack.wait_converged(generation_above=generation)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.ports['listen']}", timeout=30) as client:
        await asyncio.gather(*(plain(client, []) for _ in range(20)))  # the connection and the path warm
        await open_loop(rate, n, lambda: plain(client, sink))


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    port, picker_port, health_port = free_port(), free_port(), free_port()
    pods_list = [f"{host}:{port}" for host in PODS]
    processes: list[ManagedProcess] = []
    for folder in ("stack", "serving"):
        (workdir / folder).mkdir()
    stack = GatewayStack(workdir / "stack", envoy_binary())
    served = pinned(default_spec(0, 0), pods_list)  # the gateway serves the picker, plaintext as `picked`'s
    served["envoy_picker"] = {"host": "127.0.0.1", "port": free_port(), "tls": False, "serve": True}
    serving = GatewayStack(workdir / "serving", envoy_binary(), upstreams=Running(served))
    try:
        serve = [sys.executable, "-m", "bench.epp_cost", "--serve-pods", str(port)]
        processes.append(start_process("pods", serve, workdir))
        picker_argv = [sys.executable, "-m", "graystack", "epp", "--insecure", "--log-level", "warning"]
        picker_argv += ["--port", str(picker_port), "--health-port", str(health_port)]
        picker_argv += ["--pods", "baseline=" + ",".join(pods_list)]
        processes.append(start_process("epp", picker_argv, workdir))
        wait_until(
            lambda: httpx.post(f"http://{pods_list[0]}{PATH}", content=BODY).status_code == 200, 30, "pods"
        )
        stack.start()
        serving.start()
        latency: dict[str, list[float]] = {name: [] for name in TARGETS}
        per_block = args.n // args.blocks
        for _ in range(args.blocks):
            for name in TARGETS:
                if name == "served":
                    await block(serving, None, args.rate, per_block, latency[name])
                else:
                    spec = spec_for(stack, pods_list, picker_port, name == "picked")
                    await block(stack, spec, args.rate, per_block, latency[name])
        stats = {name: summarize(latency[name], 1000) for name in TARGETS}
        for name in TARGETS:
            print(f"latency {name:7s} {brief(stats[name])}", flush=True)
        return {
            "latency_ms": stats,
            "added_ms": {
                name: {k: round(stats[name][k] - stats["bare"][k], 3) for k in ("p50", "p90", "p99")}
                for name in ("picked", "served")
            },
            "envoy_ext_proc": ext_proc_messages(stack.ports["envoy_admin"]),
            "served_envoy_ext_proc": ext_proc_messages(serving.ports["envoy_admin"]),
        }
    finally:
        serving.stop()
        stack.stop()
        for process in processes:
            process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1500, help="requests per target")
    parser.add_argument("--rate", type=float, default=100, help="requests per second")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks per target")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/epp_own_envoy.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-epp-own-") as workdir:
        results = asyncio.run(run(args, Path(workdir)))
    parameters = {k: v for k, v in vars(args).items() if k != "out"} | {
        "pods": len(PODS),
        "picker": "graystack epp --insecure, its own process, the baseline's two pods",
        "bare": "the same stack's Envoy with no envoy_picker in the spec (the cluster's round robin)",
        "served": "a second stack alike, its gateway serving the picker (envoy_picker.serve, plaintext)",
        "client": "httpx.AsyncClient in the bench process, one connection per block",
    }
    print(f"wrote {write_result('epp_own_envoy', parameters, results, args.out)}")


if __name__ == "__main__":
    main()
