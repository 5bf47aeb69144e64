"""The picker the gateway process serves for its own Envoy (the spec's `envoy_picker` with `serve: true`,
issue 37), so no `graystack epp` has to be started and fed the pods by hand. Each variant's pods are the
endpoints the gateway gives Envoy through EDS (the spec's in local mode, the EndpointSlices' in
Kubernetes), asked at every pick with the live spec's split and scorers (gateway/epp/feed.py): a flip, a
step or a new pod reaches the next pick at once, and the picker never knows a pod Envoy's cluster lacks.

Envoy names the variant its split chose (gateway/envoy/picking.py); the picker ranks that variant's pods.
Envoy asks for the pick alone, by ext_authz over HTTP/1.1 (gateway/epp/checks.py: a gRPC stream a request
through grpc.aio cost more than the goal of +1 ms allows), and tells the gateway each picked request's
end in an access log of its own (gateway/answers/receiver.py hands it to `ended`), by which the picker
counts the request in flight to its answer's end, a streamed answer's last chunk included
(gateway/epp/held.py).
Each pod's metrics are read in the background as `envoy_picker.metrics` says
(gateway/epp/metrics_reader.py); a pod whose metrics cannot be read is ranked by its in-flight count and
listed in the status's fallbacks, as the InferencePool's picker lists them (gateway/kubernetes/pool.py).
No health server: Envoy asks none, and serves without a pick while the picker is down."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.envoy.resources import EndpointMap
from gateway.epp import tls
from gateway.epp.feed import wanted_from
from gateway.epp.metrics_reader import MetricsReader, Scrape
from gateway.epp.picker import Picker
from gateway.epp.readings import Readings
from gateway.epp.served import serve, server_context
from gateway.epp.status import PickerStatus
from gateway.epp.wanted import Wanted
from gateway.spec.envoy_picker import served
from gateway.spec.model import RolloutSpec

log = logging.getLogger(__name__)


def pods_of(endpoints: EndpointMap) -> dict[str, tuple[str, ...]]:
    """Each variant's EDS endpoints as the picker names pods (`ip:port`, the `envoy.lb` pick's form)."""
    return {
        variant: tuple(f"{ip}:{port}" for ip, port in pods) for variant, pods in endpoints.items() if pods
    }


class EnvoysPicker:
    """`live`: the live spec; `endpoints`: the variants' endpoints as Envoy has them, both asked afresh."""

    def __init__(self, live: Callable[[], RolloutSpec], endpoints: Callable[[], EndpointMap]) -> None:
        self.live, self._endpoints = live, endpoints
        readings = Readings()
        self.picker = Picker(self.wanted, readings=readings)
        self.metrics = MetricsReader(readings, self.endpoints, self.scrape)
        self._server: asyncio.Server | None = None

    def pods(self) -> dict[str, tuple[str, ...]]:
        return pods_of(self._endpoints())

    def wanted(self) -> Wanted:
        spec = self.live()
        return wanted_from(spec, self.pods(), spec.baseline or next(iter(spec.variants)))

    def endpoints(self) -> list[str]:
        return [endpoint for pods in self.pods().values() for endpoint in pods]

    def scrape(self) -> Scrape:
        picker = self.live().envoy_picker
        if picker is None:  # the spec refuses dropping a served picker (gateway/service.py)
            return Scrape()
        m = picker.metrics
        return Scrape(m.path, m.port, m.interval, m.timeout)

    async def start(self, host: str) -> None:
        """Bind the spec's port on `host`, over TLS (self-signed) unless the spec says `tls: false`."""
        bound = served(self.live().envoy_picker)
        if bound is None:
            raise ValueError("envoy_picker: the spec has the gateway serve no picker")
        port, secure = bound
        context = server_context(*await asyncio.to_thread(tls.self_signed)) if secure else None
        self._server = await serve(self.picker, host, port, context)
        log.info("picking for graystack's Envoy on %s:%d (%s)", host, port, "TLS" if secure else "plaintext")

    async def run(self) -> None:
        """Read the pods' metrics every interval, until cancelled."""
        await self.metrics.run()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # Envoy's pooled connections are left to close with the process

    def status(self) -> PickerStatus:
        """The picker's part of the admin API's status (and so of `graystack status`)."""
        pods = self.pods()
        return PickerStatus(
            pool="",
            envoy=True,
            ready=bool(pods),
            problem=None if pods else "no variant has an endpoint: every request goes unpicked",
            pods={variant: list(endpoints) for variant, endpoints in pods.items()},
            in_flight=self.picker.in_flight(),
            fallbacks=self.picker.fallbacks(),
        )
