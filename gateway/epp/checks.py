"""The picks the gateway's own picker answers for graystack's Envoy: Envoy's ext_authz filter asking over
HTTP/1.1 (gateway/envoy/picking.py), one request a pick on Envoy's pooled connections, parsed by h11.

Why not ext_proc, which GIE's gateways speak: each ext_proc request is a gRPC stream of its own, and
opening one through Python's grpc.aio costs about 1 ms; this check costs a few hundred microseconds
(BENCHMARKS.md, issue 37). graystack's Envoy asks nothing else of the picker here (no body, no answer),
so nothing of ext_proc is lost.

A check's path is `/<variant><the request's path>` (each weighted cluster names its variant in its
path prefix: the split's choice, which the picker ranks the pods of and never draws again); its headers
are the request's `x-request-id` and cohort header. The answer is always 200 (anything else would deny
the client's request): with the picked pod in `x-gateway-destination-endpoint`, which Envoy turns into
the `override_host` metadata, or with none when the variant has no pod here or the check cannot be read
(the cluster's own policy then serves). The picked pod counts the request in flight until Envoy's log
says it ended (gateway/answers/receiver.py, gateway/epp/held.py)."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import unquote

import h11

from gateway import names
from gateway.epp import telemetry
from gateway.epp.picker import Picker

log = logging.getLogger(__name__)

REQUEST_ID = "x-request-id"


def variant_of(target: bytes) -> str:
    """The variant a check's path names: its first segment."""
    return unquote(target.decode(errors="replace").lstrip("/").partition("/")[0])


def answer(picker: Picker, variant: str, headers: dict[str, str]) -> str | None:
    """The pod picked for a request of `variant` with these (lower-cased) headers; None: no pick."""
    draft = picker.draw(headers, None, variant)
    if draft is None:
        log.warning("variant %s: no pod of it known here; the request goes unpicked", variant)
        return None
    ticket = picker.place(draft, None)
    telemetry.picked(ticket.variant, ticket.unmetered)
    request_id = headers.get(REQUEST_ID)
    if request_id:
        picker.hold(ticket, request_id)
    else:  # no end will name it: counted at its pick alone
        picker.release(ticket)
    return ticket.endpoints[0]


class Checks:
    """One connection's checks, answered in order."""

    def __init__(self, picker: Picker, transport: asyncio.Transport) -> None:
        self._picker, self._transport = picker, transport
        self._connection = h11.Connection(h11.SERVER)
        self._request: h11.Request | None = None

    def feed(self, data: bytes) -> None:
        self._connection.receive_data(data)
        try:
            while (event := self._connection.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                if isinstance(event, h11.Request):
                    self._request = event
                elif isinstance(event, h11.EndOfMessage) and self._request is not None:
                    self._answer(self._request)
                elif isinstance(event, h11.ConnectionClosed):
                    self._transport.close()
                    return
        except h11.RemoteProtocolError as error:
            log.warning("an unreadable check (%s): connection closed", error)
            self._transport.close()

    def _answer(self, request: h11.Request) -> None:
        headers = {name.decode(): value.decode(errors="replace") for name, value in request.headers}
        try:
            pod = answer(self._picker, variant_of(request.target), headers)
        except Exception:  # a pick that fails is no reason to refuse the client: served unpicked
            log.exception("a check failed: the request goes unpicked")
            pod = None
        picked = [(names.EPP_DESTINATION, pod)] if pod is not None else []
        response = h11.Response(status_code=200, headers=[("content-length", "0"), *picked])
        head, end = self._connection.send(response), self._connection.send(h11.EndOfMessage())
        self._transport.write((head or b"") + (end or b""))
        self._request = None
        if self._connection.our_state is h11.MUST_CLOSE:  # the check asked to close after it
            self._transport.close()
        else:
            self._connection.start_next_cycle()
