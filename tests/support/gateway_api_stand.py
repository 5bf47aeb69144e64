"""A user's Gateway API world on one machine, for graystack's Gateway API data plane (issue 36): the
Kubernetes API stand-in (tests/support/kube_api.py), the reference gateway programming a real Envoy from
it (tests/support/reference_gateway.py: the stand-in for Istio or Envoy Gateway), model-server stand-ins
each on a loopback address of its own (so the address that served an answer names its pod), Services
with their EndpointSlices and InferencePools with their pods, the user's HTTPRoutes (with a rule and a
filter of someone else's), and traffic at a set rate. graystack's access-log receiver is the caller's:
the gateway's log goes to `als_port`.

The variants are named otherwise than their servers: `stable` is Service `llm-v1` (or pool `pool-v1`),
`canary` is `llm-v2` (`pool-v2`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from graystack.local.processes import free_port, wait_until
from tests.support.kube_api import FakeApiServer
from tests.support.named_upstreams import NamedUpstream
from tests.support.reference_gateway import ReferenceGateway

NAMESPACE = "serving"
GATEWAY = ("infra", "shared")
HEADER = "x-client-type"
SERVICES = {"llm-v1": ("127.0.0.2", "127.0.0.3"), "llm-v2": ("127.0.0.4",), "embedder": ("127.0.0.8",)}
POOLS = {"pool-v1": ("127.0.0.5", "127.0.0.6"), "pool-v2": ("127.0.0.7",)}
POOL_GROUP = "inference.networking.k8s.io"
PATH = "/v1/chat/completions"  # SERVICE_ROUTE's; POOL_ROUTE's is under /pools


def service_objects(
    name: str, addresses: tuple[str, ...], port: int, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "http", "port": 8000, "targetPort": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-x7k2p",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        },
    ]


def pool_objects(
    name: str, addresses: tuple[str, ...], port: int, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-{i}", "namespace": namespace, "labels": {"pool": name}},
            "spec": {"containers": [{"name": "server", "image": "model-server"}]},
            "status": {"phase": "Running", "podIP": address},
        }
        for i, address in enumerate(addresses)
    ]
    pool = {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"pool": name}},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}},
        },
    }
    return [*pods, pool]


def route(name: str, refs: list[dict[str, Any]], prefix: str = "/v1") -> dict[str, Any]:
    """The user's HTTPRoute: their rule to the variants (the first backend all of it), with a filter of
    the platform's, and another team's rule beside it."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"platform.example.com/owner": "inference-team"},
        },
        "spec": {
            "parentRefs": [{"name": GATEWAY[1], "namespace": GATEWAY[0]}],
            "rules": [
                {
                    "name": "chat",
                    "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                    "filters": [
                        {
                            "type": "RequestHeaderModifier",
                            "requestHeaderModifier": {"add": [{"name": "x-team", "value": "platform"}]},
                        }
                    ],
                    "backendRefs": [{**ref, "weight": 1 if i == 0 else 0} for i, ref in enumerate(refs)],
                },
                {
                    "name": "embeddings",
                    "matches": [{"path": {"type": "PathPrefix", "value": f"{prefix}/embeddings"}}],
                    "backendRefs": [{"name": "embedder", "port": 8000}],
                },
            ],
        },
    }


SERVICE_ROUTE = route("llm", [{"name": "llm-v1", "port": 8000}, {"name": "llm-v2", "port": 8000}])
POOL_ROUTE = route(
    "pools",
    [{"group": POOL_GROUP, "kind": "InferencePool", "name": p} for p in ("pool-v1", "pool-v2")],
    prefix="/pools",
)


def gateway_api(route_name: str, pools: bool = False, **more: Any) -> dict[str, Any]:
    """The spec's `gateway_api` for `stable` and `canary` on the stand's route."""
    if pools:
        backends = {
            "stable": {"kind": "InferencePool", "name": "pool-v1"},
            "canary": {"kind": "InferencePool", "name": "pool-v2"},
        }
    else:
        backends = {"stable": {"name": "llm-v1", "port": 8000}, "canary": {"name": "llm-v2", "port": 8000}}
    return {"routes": [{"name": route_name, "namespace": NAMESPACE}], "backends": backends, **more}


@dataclass
class Stand:
    """Started with `start()`, stopped (every process by PID) with `stop()`."""

    envoy: str
    logs: Path
    als_port: int
    namespace: str = NAMESPACE
    parent: tuple[str, str] = GATEWAY  # the Gateway the routes name: (namespace, name)
    services: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(SERVICES))
    pools: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(POOLS))
    access_log: bool = True  # False: a gateway whose access log cannot reach graystack (not Envoy-based)
    api: FakeApiServer = field(default_factory=FakeApiServer)
    port: int = field(default_factory=free_port)  # every server on it, each at its own address
    upstreams: dict[str, NamedUpstream] = field(default_factory=dict)  # address -> server
    gateway: ReferenceGateway | None = None
    installed: dict[str, dict[str, Any]] = field(default_factory=dict)  # route name -> as stored

    def start(self) -> Stand:
        self.api.start()
        self.gateway = ReferenceGateway(
            self.api,
            self.envoy,
            self.logs,
            gateway=self.parent,
            namespaces=(self.namespace,),
            als=f"127.0.0.1:{self.als_port}" if self.access_log else None,
            log_headers=(HEADER,),
        )
        for objects, make in ((self.services, service_objects), (self.pools, pool_objects)):
            for name, addresses in objects.items():
                for address in addresses:
                    self.upstreams[address] = NamedUpstream(name, address, self.port).start()
                for obj in make(name, addresses, self.port, self.namespace):
                    self.api.put(obj)
        self.gateway.start()
        return self

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()
        for upstream in self.upstreams.values():
            upstream.stop()
        self.api.stop()

    def install(self, obj: dict[str, Any], timeout: float = 15.0) -> dict[str, Any]:
        """The user's route as they applied it, replacing any a test left (once the gateway has dropped
        it, so that the new one is new to it too), served and reported Accepted."""
        assert self.gateway is not None
        name = obj["metadata"]["name"]
        if self.api.get("HTTPRoute", self.namespace, name) is not None:
            self.api.delete("HTTPRoute", self.namespace, name)
            wait_until(lambda: self.gateway.served(self.namespace, name) == 0, timeout, f"{name} dropped")
        stored = self.api.put(obj)
        generation = stored["metadata"]["generation"]
        self.gateway.wait_served(self.namespace, name, generation, timeout)
        wait_until(lambda: self.reported(name) >= generation, timeout, f"{name} reported")
        self.installed[name] = stored
        return stored

    def reported(self, name: str) -> int:
        """The generation the gateway last reported the route Accepted at (0: none)."""
        route = self.api.get("HTTPRoute", self.namespace, name) or {}
        return max(
            (
                c.get("observedGeneration", 0)
                for p in route.get("status", {}).get("parents", [])
                for c in p.get("conditions", [])
                if c.get("type") == "Accepted" and c.get("status") == "True"
            ),
            default=0,
        )

    def fail(self, backend: str, status: int) -> None:
        """Every server of `backend` (a Service or a pool) answers `status`."""
        for upstream in self.upstreams.values():
            if upstream.name == backend:
                upstream.status = status

    @property
    def url(self) -> str:
        assert self.gateway is not None
        return self.gateway.listener_url


@dataclass
class Traffic:
    """POSTs to the gateway at `rate` per second (None: as fast as `workers` allow); every `segment_every`th
    carries the segment header `beta`. `statuses`: what came back. Sent with aiohttp (installed with the
    kubernetes client): httpx cost this process, which serves the upstreams too, about 1 ms a request."""

    url: str
    path: str = PATH
    rate: float | None = None
    workers: int = 8
    segment_every: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _sent: int = 0

    def start(self) -> Traffic:
        started = time.monotonic()
        client = aiohttp.ClientSession(
            self.url,
            connector=aiohttp.TCPConnector(limit=self.workers),
            timeout=aiohttp.ClientTimeout(total=5),
        )
        self._tasks = [asyncio.create_task(self._work(client, started)) for _ in range(self.workers)]
        self._client = client
        return self

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.close()

    async def _work(self, client: aiohttp.ClientSession, started: float) -> None:
        body = {"model": "llm", "messages": [{"role": "user", "content": "hello"}]}
        while True:
            index = self._sent
            self._sent += 1
            if self.rate is not None:
                await asyncio.sleep(max(0.0, started + index / self.rate - time.monotonic()))
            beta = self.segment_every and index % self.segment_every == 0
            headers = {HEADER: "beta"} if beta else {}
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with client.post(self.path, json=body, headers=headers) as response:
                    await response.read()
                self.statuses[response.status] += 1
