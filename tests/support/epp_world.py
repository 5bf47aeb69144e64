"""`graystack kube-gateway` serving a GIE Endpoint Picker in-process for one InferencePool, behind a GIE
gateway's data plane on the real Envoy 1.40 (override_host, tests/support/gie_data_plane.py), against the
Kubernetes API stand-in (no real API server runs here). The pool's pods are small servers on loopback
addresses of their own, labelled by track; the variants are named otherwise. Shared by the picker's
rollout tests and bench/epp_flip.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gateway.app import GatewayProcess
from gateway.kubernetes.pool import PickerOptions, PoolPicker
from gateway.kubernetes.process import KubernetesOptions, gateway_options, kubernetes_gateway
from graystack.local.processes import free_port
from tests.support.gie_data_plane import DataPlane, PickerAddress
from tests.support.kube_api import FakeApiServer
from tests.support.named_upstreams import NamedUpstream, serving

NS, SPEC_CM, STATE_CM, LEASE, POD = "serving", "gs-spec", "gs-rollout-state", "gs-gateway-leader", "gateway-a"
POOL = "llm"


# The pods the picker's rollout tests serve from (name -> (ip, track)): the stable track's two, the canary's one.
PODS = {"v1-a": ("127.0.8.1", "v1"), "v1-b": ("127.0.8.2", "v1"), "v2-a": ("127.0.8.3", "v2")}
TRACK = {name: track for name, (_, track) in PODS.items()}


def rollout_spec(**endpoint_picker: Any) -> dict[str, Any]:
    """Their rollout: `stable` and `canary` (named otherwise than the tracks), cohorts by `x-user`, 20 then
    100 %, judged on the answers the gateway's access log brings (errors; no first token there); the
    picker's pool `llm` with `endpoint_picker`'s fields (its `values`, its `models`) added."""
    return {
        "name": "llm",
        "variants": {
            "stable": {"service": "llm-v1", "port": 8000},
            "canary": {"service": "llm-v2", "port": 8000},
        },
        "routing": {"weights": {"stable": 100, "canary": 0}, "affinity": [{"header": "x-user"}]},
        "retries": {"fallback": "stable"},
        "strategy": {"steps": [{"weight": 20, "hold": "1h"}, {"weight": 100, "hold": "1h"}]},
        "analysis": {
            "interval": "0.5s",
            "min_detectable_error_rate": 0.1,
            "max_latency_ratio": None,
            "max_ttft_p95": None,
            "expected_weight_status": None,
        },
        "endpoint_picker": {"pool": POOL, "namespace": NS, "variant_label": "track", **endpoint_picker},
    }


def pod(name: str, ip: str, track: str, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": POOL, "track": track}},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def inference_pool(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": POOL}},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": "graystack", "port": {"number": 9002}},
        },
    }


async def until(check: Callable[[], object], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds} s")
        await asyncio.sleep(0.05)


def pool_of(gateway: GatewayProcess) -> PoolPicker:
    """The gateway's InferencePool and its picker."""
    placement = gateway.driver.placement
    assert isinstance(placement, PoolPicker), "the gateway serves no Endpoint Picker"
    return placement


@dataclass
class World:
    api: FakeApiServer
    gateway: GatewayProcess
    plane: DataPlane
    upstreams: dict[str, NamedUpstream]


@asynccontextmanager
async def picker_world(
    envoy_binary: str, folder: Path, spec: Mapping[str, Any], pods: Mapping[str, tuple[str, str]]
) -> AsyncIterator[World]:
    """The world for `spec` (its `endpoint_picker` naming pool `llm` in namespace `serving`, label `track`)
    and `pods` (name -> (ip, track)), started; everything stopped on the way out."""
    api = FakeApiServer().start()
    port = free_port()
    servers = serving({name: ip for name, (ip, _) in pods.items()}, port)
    upstreams = next(servers)
    for name, (ip, track) in pods.items():
        api.put(pod(name, ip, track))
    api.put(inference_pool(port))
    for name, data in ((SPEC_CM, {"spec.yaml": yaml.safe_dump(dict(spec))}), (STATE_CM, None)):
        api.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}
            | ({"data": data} if data else {})
        )
    api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NS}})
    picker = PickerOptions(port=free_port(), health_port=free_port(), insecure=True)
    kube = KubernetesOptions(
        NS, SPEC_CM, STATE_CM, LEASE, POD, pod=POD,
        kubeconfig=str(api.write_kubeconfig(folder / "kubeconfig", NS)), lease_seconds=2.0, picker=picker,
    )  # fmt: skip
    als = free_port()  # the gateway's xDS port, where its access log goes too
    gateway = kubernetes_gateway(gateway_options(kube, xds_port=als, admin_port=free_port()), kube)
    addresses = [f"{ip}:{port}" for ip, _ in pods.values()]
    plane = DataPlane(envoy_binary, folder, "override_host", PickerAddress(picker.port), addresses, als=als)
    try:
        await gateway.start()
        plane.start()
        await until(lambda: pool_of(gateway).ready(), 10, "the pool's pods read")
        await until(lambda: gateway.controller.state.label() == "step 0", 10, "step 0")
        yield World(api, gateway, plane, upstreams)
    finally:
        await gateway.stop()
        plane.stop()
        servers.close()
        api.stop()
