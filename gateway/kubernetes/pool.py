"""The InferencePool whose picker the gateway process is (the spec's `endpoint_picker`, issue 37): its
pods by variant, read from the API server every REFRESH seconds, and the picker served beside the
admin API, fed the live spec at every pick (gateway/epp/feed.py), so a step, a flip or a rollback reaches
the next pick without a reconcile in between.

A read that fails keeps the last pods and is logged; until the first read, and while no pod of any
variant matches, the picker reports itself not ready (gRPC health, with the reason logged), so a gateway
sends it nothing it could not place. Beside the pods, each pod's metrics are read every
`endpoint_picker.metrics.interval` (gateway/epp/metrics_reader.py) for the scorers; a pod whose metrics
cannot be read is picked by in-flight counts, listed by `picker.fallbacks()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from kubernetes import client

from gateway import names
from gateway.admin.protocol import PickerStatus
from gateway.answers.entries import segment_of
from gateway.epp import tls
from gateway.epp.feed import pool_endpoints, wanted_from
from gateway.epp.metrics_reader import MetricsReader, Scrape
from gateway.epp.picker import Picker
from gateway.epp.readings import Readings
from gateway.epp.server import EppServer, start
from gateway.epp.wanted import Wanted
from gateway.kubernetes.api import call_json
from gateway.rollout.plan import roles
from gateway.spec.model import RolloutSpec

log = logging.getLogger(__name__)

REFRESH = 2.0  # seconds between reads of the pool's pods


@dataclass(frozen=True)
class PickerOptions:
    host: str = "127.0.0.1"  # in a pod: 0.0.0.0, where the user's gateway calls it (over TLS)
    port: int = 9002
    health_port: int = 9003
    insecure: bool = False  # no TLS (tests); by default a self-signed certificate, as GIE's picker


class PoolPicker:
    """The pool's pods, and the picker that serves them."""

    def __init__(
        self, api: client.ApiClient, live: Callable[[], RolloutSpec], options: PickerOptions
    ) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.live = live
        self.options = options
        self.pods: dict[str, tuple[str, ...]] | None = None  # None: not yet read
        self.problem: str | None = None  # why the last read found no pod to pick
        readings = Readings()
        self.picker = Picker(self.wanted, readings=readings)
        self.metrics = MetricsReader(readings, self.endpoints, self.scrape)
        self._server: EppServer | None = None

    def wanted(self) -> Wanted:
        spec = self.live()
        return wanted_from(spec, self.pods or {}, roles(spec)[0])

    # -- the answer receiver's Placement: the user's gateway logs each answer's pod ------------------

    def variant(self, upstream_host: str, headers: Mapping[str, str]) -> str | None:
        """The variant whose pod (at this port: data-parallel ranks are endpoints of their own) served, or
        the model variant the picker marked the request with, on the baseline's pods (Wanted.answered_as)."""
        return self.wanted().answered_as(upstream_host, headers.get(names.ROUTED_HEADER))

    def segment(self, headers: Mapping[str, str]) -> str:
        return segment_of(self.live().routing, headers)

    def endpoints(self) -> list[str]:
        return [endpoint for pods in (self.pods or {}).values() for endpoint in pods]

    def scrape(self) -> Scrape:
        picker = self.live().endpoint_picker
        if picker is None:
            return Scrape()
        m = picker.metrics
        return Scrape(m.path, m.port, m.interval, m.timeout)

    def read(self) -> None:
        """(on a thread) The pool's ready pods by variant."""
        spec = self.live()
        picker = spec.endpoint_picker
        if picker is None:
            return
        pool: dict[str, Any] = call_json(
            self.objects.get_namespaced_custom_object,
            "inference.networking.k8s.io",
            "v1",
            picker.namespace,
            "inferencepools",
            picker.pool,
        )
        pods = call_json(self.core.list_namespaced_pod, picker.namespace).get("items", [])
        self.pods = pool_endpoints(pool, pods, picker, spec.variants)
        problem = None
        if not self.pods:
            marks = ", ".join(f"{picker.variant_label}={picker.value_of(v)}" for v in spec.variants)
            problem = (
                f"InferencePool {picker.namespace}/{picker.pool}: no Running, Ready pod matches its selector "
                f"with one of {marks}"
            )
        if problem != self.problem and problem is not None:
            log.warning("%s: the picker is not ready", problem)
        self.problem = problem

    async def start(self) -> None:
        credentials: grpc.ServerCredentials | None = None
        if not self.options.insecure:
            credentials = tls.credentials(*await asyncio.to_thread(tls.self_signed))
        o = self.options
        self._server = await start(self.picker, o.host, o.port, o.health_port, credentials, ready=self.ready)
        log.info("picking for the InferencePool on %s:%d, health on %d", o.host, o.port, o.health_port)

    def status(self) -> PickerStatus:
        """The picker's part of the admin API's status (and so of `graystack status`)."""
        picker = self.live().endpoint_picker
        return PickerStatus(
            pool=f"{picker.namespace}/{picker.pool}" if picker is not None else "",
            ready=self.ready(),
            problem=self.problem if self.pods is not None else "the pool's pods not read yet",
            pods={variant: list(pods) for variant, pods in (self.pods or {}).items()},
            in_flight=self.picker.in_flight(),
            fallbacks=self.picker.fallbacks(),
        )

    def ready(self) -> bool:
        """Pods read, and some to pick: a gateway sends a picker that is not ready nothing."""
        return self.pods is not None and self.problem is None

    async def run(self) -> None:
        """Read the pods every REFRESH seconds and their metrics every interval, until cancelled."""
        await asyncio.gather(self._read_pods(), self.metrics.run())

    async def _read_pods(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.read)
            except Exception as error:  # the last pods stand; the next read may succeed
                log.warning("the InferencePool's pods could not be read: %s", error)
            await asyncio.sleep(REFRESH)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
