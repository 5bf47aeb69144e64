"""A test-only reference Gateway API gateway: it stands in for Istio or Envoy Gateway, since no real
Gateway API implementation can run here (no Kubernetes, no Docker), so that graystack's `gatewayapi` data
plane (the HTTPRoute weights it writes, the `Accepted` it waits for, the split it then sees in the answers)
is tested end to end against a real Envoy that a controller programs from the objects.

Like Envoy Gateway, it watches the API (here: polls the stand-in, tests/support/kube_api.py, every
`interval`) for the HTTPRoutes whose parentRefs name its Gateway and for the Services, EndpointSlices,
InferencePools and Pods they reference, and programs a real Envoy 1.40 over ADS (graystack's generic xDS
layer, gateway/xds; Envoy is never restarted): one listener; a route per rule match, in Gateway API's
order of precedence, splitting by the backendRefs' weights over one cluster per backendRef; mirrors
(`RequestMirror`, with `percent` or `fraction`); an HTTP gRPC access log to the EnvoyProxy ALS sink,
whose entries carry the address that served each request (common_properties.upstream_remote_address).
It writes each route's `status.parents` (Accepted, ResolvedRefs, at the generation translated) through
the status subresource. tests/support/reference_translation.py builds the resources.

What it leaves out: no Endpoint Picker and no ext_proc (an InferencePool's selected pods are a plain
round-robin cluster at its targetPorts, EDS-free: STATIC clusters re-sent when they change); no Gateway
or GatewayClass objects are read (the Gateway served is named at construction, its one listener on
127.0.0.1) and none of their status is written; no hostnames (one virtual host, `*`), no filters but
RequestMirror, no ReferenceGrants (a backendRef into another namespace is RefNotPermitted), no TLS; the
share of a weight whose backend does not resolve gets 503 (an empty cluster), not Gateway API's 500,
which only a rule none of whose backends can take a request answers.

It can misbehave (`Bug`, given at construction or set on `bug` while it runs), as real gateways have, so
that tests show graystack notices: status late or never, weights ignored, a rule's traffic all to one
backend, or a rule over several pools served by the first pool's pods (istio#61594).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from gateway import names
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import AdsServer, start_server
from graystack.local.processes import ManagedProcess, free_port, start_process
from tests.support.reference_backends import Key, Objects
from tests.support.reference_translation import Bug, Listen, Outcome, Weights, parent_refs, translate

log = logging.getLogger(__name__)

NODE = "reference-gateway"
CONTROLLER = "example.net/reference-gateway"
XDS_CLUSTER = "xds"


class Api(Protocol):
    """What the gateway asks of the API: the stand-in's in-process calls (tests/support/kube_api.py)."""

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list(self, kind: str, namespace: str) -> list[dict[str, Any]]: ...

    def put(self, obj: dict[str, Any], status: bool = False) -> dict[str, Any]: ...


class ReferenceGateway:
    """Envoy Gateway's part for one Gateway: `start()`, then routes written to `api` are served at
    `listener_url`; `stop()` stops Envoy by PID and the control plane's thread."""

    def __init__(
        self,
        api: Api,
        envoy: str,
        logs: Path,
        *,
        gateway: Key = ("default", "gateway"),
        namespaces: tuple[str, ...] = (),
        als: str | None = None,
        log_name: str = names.ANSWER_LOG,
        log_headers: tuple[str, ...] = (),
        bug: Bug = Bug.NONE,
        lag: float = 1.0,
        controller: str = CONTROLLER,
        interval: float = 0.2,
    ) -> None:
        """`gateway`: the (namespace, name) routes name as parent; `namespaces`: where routes and their
        backends are read (default: the Gateway's); `als`: host:port of a gRPC access-log service;
        `log_headers`: the request headers its access log carries; `lag`: how late Bug.ACCEPTED_LATE
        writes the status, and Bug.PROGRAMMED_LATE programs Envoy."""
        self.api = api
        self.bug = bug
        self.lag = lag
        self.controller = controller
        self.listen = Listen(gateway, free_port(), als, log_name, log_headers)
        self.envoy: ManagedProcess | None = None
        self._binary, self._logs, self._interval = envoy, logs, interval
        self._namespaces = namespaces or (gateway[0],)
        self._xds_port, self._admin_port = free_port(), free_port()
        self._cache = SnapshotCache()
        self._pending: tuple[list[bytes], float] | None = None  # resources Envoy is not yet given, since
        self._ads = AdsServer(self._cache)
        self._programmed: list[bytes] = []
        self._first_seen: dict[Key, int] = {}
        self._first_weights: dict[Key, Weights] = {}
        self._served: dict[Key, tuple[int, float]] = {}  # generation, and since when (monotonic)
        self._changed = threading.Condition()
        self._error = ""
        self._up = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="reference-gateway", daemon=True)

    @property
    def listener_url(self) -> str:
        return f"http://127.0.0.1:{self.listen.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self._admin_port}"

    # -- lifecycle (from the test's main thread: Envoy dies with the thread that started it) -----------

    def start(self) -> ReferenceGateway:
        self._thread.start()
        if not self._up.wait(10):
            raise RuntimeError(f"the reference gateway's ADS server did not start: {self._error}")
        self._logs.mkdir(parents=True, exist_ok=True)
        bootstrap = self._logs / "reference-envoy.yaml"
        bootstrap.write_text(yaml.safe_dump(self._bootstrap()))
        argv = [self._binary, "-c", str(bootstrap), "--disable-hot-restart", "--concurrency", "1"]
        self.envoy = start_process("reference-envoy", [*argv, "-l", "warning"], self._logs)
        self.envoy.wait_healthy(self._ready, 30, "the reference gateway's Envoy to take its configuration")
        return self

    def stop(self) -> None:
        if self.envoy is not None:
            self.envoy.stop()
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread.is_alive():
            self._thread.join(10)

    def _ready(self) -> bool:
        live = httpx.get(f"{self.admin_url}/ready", timeout=2).status_code == 200
        return live and self._ads.proxy_count() > 0 and self._ads.converged()

    def _bootstrap(self) -> dict[str, Any]:
        ads = {"ads": {}, "resource_api_version": "V3"}
        xds = {"socket_address": {"address": "127.0.0.1", "port_value": self._xds_port}}
        options = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
        http2 = {
            "@type": f"type.googleapis.com/{options}",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
        return {
            "node": {"id": NODE, "cluster": NODE},
            "admin": {
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": self._admin_port}}
            },
            "dynamic_resources": {
                "ads_config": {
                    "api_type": "GRPC",
                    "transport_api_version": "V3",
                    "set_node_on_first_message_only": True,
                    "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
                },
                "cds_config": ads,
                "lds_config": ads,
            },
            "static_resources": {
                "clusters": [
                    {
                        "name": XDS_CLUSTER,
                        "type": "STATIC",
                        "connect_timeout": "1s",
                        "typed_extension_protocol_options": {options: http2},
                        "load_assignment": {
                            "cluster_name": XDS_CLUSTER,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": xds}}]}],
                        },
                    }
                ]
            },
        }

    # -- what tests wait for --------------------------------------------------------------------------

    def wait_served(self, namespace: str, name: str, generation: int, timeout: float = 10.0) -> None:
        """Until Envoy has taken (ACKed) a configuration translated from the route at `generation` or
        later, whatever the bug made of it; TimeoutError otherwise."""
        with self._changed:
            if self._changed.wait_for(lambda: self.served(namespace, name) >= generation, timeout):
                return
        problem = f" (the last look failed: {self._error})" if self._error else ""
        raise TimeoutError(
            f"HTTPRoute {namespace}/{name} generation {generation} not served in {timeout} s{problem}"
        )

    def served(self, namespace: str, name: str) -> int:
        """The route's generation Envoy serves (0: none)."""
        return self._served.get((namespace, name), (0, 0.0))[0]

    # -- the control plane's thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as error:  # start() reports it
            self._error = repr(error)
            log.exception("the reference gateway stopped")

    async def _main(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        server = await start_server(self._ads, "127.0.0.1", self._xds_port)
        self._up.set()
        try:
            while not self._stopping.is_set():
                try:
                    self._look()
                except Exception as error:  # a test's odd object must not stop the gateway
                    self._error = repr(error)
                    log.exception("the reference gateway's look failed")
                try:
                    async with asyncio.timeout(self._interval):
                        await self._stopping.wait()
                except TimeoutError:
                    pass
        finally:
            await server.stop(grace=None)

    def _look(self) -> None:
        """Read, translate, program Envoy where the resources changed, note what Envoy serves, and write
        each route's status as the bug allows."""
        objects = self._read()
        translation = translate(objects, self.listen, self.bug, self._first_weights)
        outcomes = translation.outcomes
        for route, outcome in outcomes.items():
            self._first_seen.setdefault(route, outcome.generation)
            self._first_weights.setdefault(route, outcome.weights)
        serialized = [
            m.SerializeToString(deterministic=True) for ms in translation.resources.values() for m in ms
        ]
        now = time.monotonic()
        if serialized != self._programmed and self._programs(serialized, now):
            self._cache.set_resources(NODE, translation.resources)
            self._programmed = serialized
        with self._changed:
            for table in (self._first_seen, self._first_weights, self._served):
                for gone in set(table) - set(outcomes):
                    del table[gone]  # a route deleted, and any made again under its name, is a new one
            if self._ads.proxy_count() and self._ads.converged():  # Envoy took what these generations made
                for route, outcome in outcomes.items():
                    if self.served(*route) < outcome.generation:
                        self._served[route] = (outcome.generation, now)
                self._changed.notify_all()
        for route, outcome in outcomes.items():
            if self._due(route, outcome.generation, now):
                self._write_status(route, outcome)

    def _read(self) -> Objects:
        def every(kind: str) -> list[dict[str, Any]]:
            return [obj for namespace in self._namespaces for obj in self.api.list(kind, namespace)]

        return Objects(
            routes=every("HTTPRoute"),
            services=every("Service"),
            slices=every("EndpointSlice"),
            pools=every("InferencePool"),
            pods=every("Pod"),
        )

    def _programs(self, serialized: list[bytes], now: float) -> bool:
        """Whether Envoy is given these resources now: at once, or `lag` seconds after they first differed
        from what it has (Bug.PROGRAMMED_LATE, while the status says Accepted at once)."""
        if self.bug is not Bug.PROGRAMMED_LATE:
            return True
        if self._pending is None or self._pending[0] != serialized:
            self._pending = (serialized, now)
        return now >= self._pending[1] + self.lag

    def _due(self, route: Key, generation: int, now: float) -> bool:
        """Whether the route's status at `generation` may be written now, as the bug has it."""
        if self.bug is Bug.NEVER_ACCEPTED:
            return generation <= self._first_seen[route]
        if self.bug is Bug.ACCEPTED_LATE:
            served, since = self._served.get(route, (0, now))
            return served >= generation and now >= since + self.lag
        return True

    def _write_status(self, route: Key, outcome: Outcome) -> None:
        current = self.api.get("HTTPRoute", *route)
        if current is None or current["metadata"].get("generation") != outcome.generation:
            return  # changed since the look: the next one translates it
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        parents = route_parents(current, outcome, self.listen.gateway, self.controller, stamp)
        if _unstamped(parents) != _unstamped(current.get("status", {}).get("parents", [])):
            self.api.put(
                {**current, "status": {**current.get("status", {}), "parents": parents}}, status=True
            )


def route_parents(
    route: Mapping[str, Any], outcome: Outcome, gateway: Key, controller: str, stamp: str
) -> list[dict[str, Any]]:
    """The route's `status.parents`: other controllers' entries as they were, and this controller's for
    each parentRef naming `gateway`: Accepted, and ResolvedRefs (False with the first reason where a
    reference did not resolve), at the generation translated."""

    def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
            "observedGeneration": outcome.generation,
            "lastTransitionTime": stamp,
        }

    missing = outcome.unresolved
    conditions = [
        condition("Accepted", True, "Accepted", "Route is accepted"),
        condition(
            "ResolvedRefs",
            not missing,
            missing[0].reason if missing else "ResolvedRefs",
            "; ".join(m.message for m in missing) or "Resolved all the Object references for the Route",
        ),
    ]
    others = [p for p in route.get("status", {}).get("parents", []) if p.get("controllerName") != controller]
    ours = [
        {"parentRef": ref, "controllerName": controller, "conditions": conditions}
        for ref in parent_refs(route, gateway)
    ]
    return others + ours


def _unstamped(parents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries without their conditions' times: a status that only would restamp is not rewritten."""
    return [
        {
            **p,
            "conditions": [
                {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in p.get("conditions", [])
            ],
        }
        for p in parents
    ]
