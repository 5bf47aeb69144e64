"""What each way for Envoy to ask a picker in Python costs a request (issue 37's +1 ms goal): the same
pick, asked over four transports, against no picker, side by side in alternating blocks.

    bare         Envoy's round robin over the two pods, nothing asked
    ext_proc     ext_proc over gRPC, the request's headers only (one stream a request, one round trip:
                 what graystack's own Envoy asks the picker its gateway serves, gateway/envoy/picking.py)
    authz_grpc   ext_authz over gRPC: one unary `Check` a request, the pick in its dynamic metadata
    authz_http   ext_authz over HTTP/1.1 (Envoy's pooled connections) to a raw-asyncio responder: the pick
                 in a header of its answer, turned into dynamic metadata (`dynamic_metadata_from_headers`)
    lua_http     a Lua filter's `httpCall` to the same responder, the pick set into `envoy.lb` metadata

Each Envoy balances the two pods by `override_host` reading the pick from the metadata namespace its
filter writes (`envoy.lb` for ext_proc and Lua, `envoy.filters.http.ext_authz` for ext_authz), round
robin without one. All of them are answered from one process and one event loop (as the gateway serves
its picker), each with the real `Picker` (gateway/epp/picker.py) ranking the same two pods. Before it
measures, the run checks that each Envoy serves every request on the pod the picker names. The pods are
bench/epp_cost.py's raw-asyncio pods; the client is httpx in this process, open loop, small
non-streamed POSTs.

    .venv/bin/python -m bench.epp_transport        # -> bench/results/epp_transport.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from google.protobuf import struct_pb2

from bench._common import brief, envoy_binary, summarize, write_result
from bench.epp_cost import BODY, PATH, PODS, open_loop, plain
from gateway import names
from gateway.epp import conformance
from gateway.epp.picker import Picker
from gateway.epp.service import ExtProc
from gateway.epp.wanted import Wanted
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from tests.support.gie_data_plane import override_host_policy

TARGETS = ("bare", "ext_proc", "authz_grpc", "authz_http", "lua_http")
AUTHZ_NAMESPACE = "envoy.filters.http.ext_authz"
CHECK_HEADER = conformance.SELECTION  # GIE's test header: the pod a check wants picked


def picker_of(pods: list[str]) -> Picker:
    wanted = Wanted(pods={"baseline": tuple(pods)}, weights={"baseline": 100}, baseline="baseline")
    return Picker(lambda: wanted)


def pick(picker: Picker, headers: dict[str, str]) -> str:
    """The picker's pod for a request, or the one its CHECK_HEADER names (the run's check that each
    Envoy follows the pick)."""
    if CHECK_HEADER in headers:
        return headers[CHECK_HEADER]
    draft = picker.draw(headers, None, "baseline")
    assert draft is not None
    ticket = picker.place(draft, None)
    picker.release(ticket)  # counted from the pick to the answer elsewhere; the cost here is the pick
    return ticket.endpoints[0]


class Authorization(external_auth_pb2_grpc.AuthorizationServicer):
    """ext_authz's `Check`: always allowed, the pick in the answer's dynamic metadata."""

    def __init__(self, picker: Picker) -> None:
        self._picker = picker

    async def Check(
        self, request: external_auth_pb2.CheckRequest, context: grpc.aio.ServicerContext
    ) -> external_auth_pb2.CheckResponse:
        headers = dict(request.attributes.request.http.headers)
        metadata = struct_pb2.Struct()
        metadata.update({names.EPP_DESTINATION: pick(self._picker, headers)})
        return external_auth_pb2.CheckResponse(
            ok_response=external_auth_pb2.OkHttpResponse(), dynamic_metadata=metadata
        )


def http_responder(picker: Picker) -> type[asyncio.Protocol]:
    """An HTTP/1.1 keep-alive responder for ext_authz's HTTP service: 200 with the pick in a header."""

    class Responder(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
                lines = head.decode(errors="replace").split("\r\n")[1:]
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)
                }
                endpoint = pick(picker, headers)
                self.transport.write(
                    f"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n{names.EPP_DESTINATION}: {endpoint}\r\n\r\n".encode()
                )

    return Responder


async def serve_pickers(pods: list[str], grpc_port: int, http_port: int) -> None:
    """ext_proc and ext_authz's `Check` on `grpc_port`, ext_authz's HTTP service on `http_port`."""
    server = grpc.aio.server()
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(
        ExtProc(picker_of(pods), test_headers=True), server
    )
    external_auth_pb2_grpc.add_AuthorizationServicer_to_server(Authorization(picker_of(pods)), server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()
    loop = asyncio.get_running_loop()
    await loop.create_server(http_responder(picker_of(pods)), "127.0.0.1", http_port)
    await server.wait_for_termination()


def _cluster(name: str, hosts: list[tuple[str, int]], http2: bool = False) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": {"socket_address": {"address": h, "port_value": p}}}}
                    ]
                }
                for h, p in hosts
            ],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


LUA_PICK = f"""
function envoy_on_request(handle)
  local asked = {{[":method"] = "POST", [":path"] = "/baseline", [":authority"] = "picker",
                 ["x-request-id"] = handle:headers():get("x-request-id") or ""}}
  local check = handle:headers():get("{CHECK_HEADER}")
  if check then asked["{CHECK_HEADER}"] = check end
  local answer = handle:httpCall("picker_http", asked, "", 1000)
  local pod = answer["{names.EPP_DESTINATION}"]
  if pod then handle:streamInfo():dynamicMetadata():set("{names.EPP_LB_NAMESPACE}", "{names.EPP_DESTINATION}", pod) end
end
"""


def _picker_filter(target: str) -> dict[str, Any] | None:
    if target == "ext_proc":
        return {
            "name": "envoy.filters.http.ext_proc",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
                "grpc_service": {
                    "envoy_grpc": {"cluster_name": "picker_grpc"},
                    "initial_metadata": [{"key": names.ROUTED_HEADER, "value": "baseline"}],
                },
                "failure_mode_allow": True,
                "message_timeout": "1s",
                "processing_mode": {
                    "request_header_mode": "SEND",
                    "response_header_mode": "SKIP",
                    "request_body_mode": "NONE",
                    "response_body_mode": "NONE",
                    "request_trailer_mode": "SKIP",
                    "response_trailer_mode": "SKIP",
                },
                "metadata_options": {"receiving_namespaces": {"untyped": [names.EPP_LB_NAMESPACE]}},
                "route_cache_action": "RETAIN",
            },
        }
    if target == "lua_http":
        return {
            "name": "envoy.filters.http.lua",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": LUA_PICK},
            },
        }
    authz: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "transport_api_version": "V3",
        "failure_mode_allow": True,
        "allowed_headers": {"patterns": [{"exact": CHECK_HEADER}, {"exact": "x-request-id"}]},
    }
    if target == "authz_grpc":
        authz["grpc_service"] = {"envoy_grpc": {"cluster_name": "picker_grpc"}, "timeout": "1s"}
    elif target == "authz_http":
        authz["http_service"] = {
            "server_uri": {"uri": "http://picker", "cluster": "picker_http", "timeout": "1s"},
            "authorization_response": {
                "dynamic_metadata_from_headers": {"patterns": [{"exact": names.EPP_DESTINATION}]}
            },
        }
    else:
        return None
    return {"name": "envoy.filters.http.ext_authz", "typed_config": authz}


def envoy_config(
    target: str, listen: int, admin: int, pods: list[str], grpc_port: int, http_port: int
) -> dict[str, Any]:
    namespace = names.EPP_LB_NAMESPACE if target in ("ext_proc", "lua_http") else AUTHZ_NAMESPACE
    balancing: dict[str, Any] = {"lb_policy": "ROUND_ROBIN"}
    if target != "bare":
        balancing = {"load_balancing_policy": override_host_policy(namespace)}
    hosts = [(pod.rpartition(":")[0], int(pod.rpartition(":")[2])) for pod in pods]
    picker_filter = _picker_filter(target)
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "ingress",
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "pods"}}],
                }
            ]
        },
        "http_filters": [
            *([picker_filter] if picker_filter else []),
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
        ],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "ingress",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": manager,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {**_cluster("pods", hosts), **balancing},
                _cluster("picker_grpc", [("127.0.0.1", grpc_port)], http2=True),
                _cluster("picker_http", [("127.0.0.1", http_port)]),
            ],
        },
    }


async def block(url: str, rate: float, n: int, sink: list[float]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await asyncio.gather(*(plain(client, []) for _ in range(20)))  # the connection and the path warm
        await open_loop(rate, n, lambda: plain(client, sink))


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    pod_port, grpc_port, http_port = free_port(), free_port(), free_port()
    pods = [f"{host}:{pod_port}" for host in PODS]
    processes: list[ManagedProcess] = []
    try:
        serve = [sys.executable, "-m", "bench.epp_cost", "--serve-pods", str(pod_port)]
        processes.append(start_process("pods", serve, workdir))
        pickers = [
            sys.executable,
            "-m",
            "bench.epp_transport",
            "--serve-pickers",
            str(grpc_port),
            str(http_port),
        ]
        processes.append(start_process("pickers", [*pickers, *pods], workdir))
        urls: dict[str, str] = {}
        admins: dict[str, int] = {}
        for target in TARGETS:
            listen, admin = free_port(), free_port()
            config = workdir / f"{target}.yaml"
            config.write_text(yaml.safe_dump(envoy_config(target, listen, admin, pods, grpc_port, http_port)))
            command = [envoy_binary(), "-c", str(config), "--disable-hot-restart", "--concurrency", "2"]
            command += ["-l", "warning", "--base-id", str(admin)]
            processes.append(start_process(f"envoy-{target}", command, workdir))
            urls[target], admins[target] = f"http://127.0.0.1:{listen}", admin
        for target, url in urls.items():
            wait_until(partial(_answers, url), 20, f"{target}'s Envoy answering")
            if target != "bare":  # a picker not yet listening is failed open: Envoy's own policy serves
                wait_until(partial(_followed, url, admins[target], pods[1]), 20, f"{target} following picks")
        per_block = max(1, args.n // args.blocks)
        latency: dict[str, list[float]] = {target: [] for target in TARGETS}
        for _ in range(args.blocks):
            for target in TARGETS:
                await block(urls[target], args.rate, per_block, latency[target])
    finally:
        for process in reversed(processes):
            process.stop()
    stats = {target: summarize(values, 1000) for target, values in latency.items()}
    for target, summary in stats.items():
        print(f"latency {target:10s} {brief(summary)}", flush=True)
    added = {
        target: {q: round(stats[target][q] - stats["bare"][q], 3) for q in ("p50", "p90", "p99")}
        for target in TARGETS[1:]
    }
    return {"latency_ms": stats, "added_ms": added}


def _served(admin: int, pod: str) -> int:
    text = httpx.get(f"http://127.0.0.1:{admin}/clusters").text
    return sum(
        int(line.rpartition("::")[2])
        for line in text.splitlines()
        if line.startswith(f"pods::{pod}::rq_total")
    )


def _followed(url: str, admin: int, pod: str) -> bool:
    """Every request the picker sends to `pod` is served there: the pick reaches Envoy's balancer."""
    before = _served(admin, pod)
    for _ in range(10):
        httpx.post(f"{url}{PATH}", content=BODY, headers={CHECK_HEADER: pod}, timeout=5).raise_for_status()
    return _served(admin, pod) - before == 10


def _answers(url: str) -> bool:
    try:
        return httpx.post(f"{url}{PATH}", content=BODY, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=1500, help="requests per target")
    parser.add_argument("--rate", type=float, default=100, help="requests per second")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks per target")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/epp_transport.json")
    parser.add_argument("--serve-pickers", nargs="+", metavar="PORT_OR_POD", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_pickers:
        grpc_port, http_port, *pods = args.serve_pickers
        asyncio.run(serve_pickers(pods, int(grpc_port), int(http_port)))
        return
    with tempfile.TemporaryDirectory(prefix="epp-transport-") as workdir:
        results = asyncio.run(run(args, Path(workdir)))
    parameters = {
        "n": args.n,
        "rate": args.rate,
        "blocks": args.blocks,
        "pickers": "one process, one event loop: ext_proc and ext_authz gRPC on one grpc.aio server, "
        "ext_authz HTTP on a raw-asyncio protocol, each with the real Picker over the same two pods",
        "client": "httpx.AsyncClient in the bench process, one connection per block",
    }
    write_result("epp_transport", parameters, results, args.out)


if __name__ == "__main__":
    main()
