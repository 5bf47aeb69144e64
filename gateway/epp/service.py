"""The ext_proc service: one gRPC stream per HTTP request, walked in Envoy's order (request headers, body
chunks, trailers; then the answer's). The pick is made on the request headers. For a variant of pods the
request is held for one Python call and never for its body; every body chunk is echoed as it comes
(FULL_DUPLEX_STREAMED), whatever it holds: a body that is not JSON is routed like any other. For a model
variant (its requests' `model` rewritten, served by the baseline's pods) the headers' answer waits for the
whole body, up to `rewrite.BOUND`: the body is rewritten and sent back as one chunk, its new length in the
headers' answer. A body that cannot be rewritten (too long, not JSON, no `model`) goes as it came, to the
same pods, counted as the baseline's, and a log line and `unchanged` say why. The pod's count is released
when the answer ends or, whatever happens, when the stream closes."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from gateway.epp import conformance, protocol, rewrite
from gateway.epp.picker import Picker, Ticket

NOTHING_ELIGIBLE = "no endpoint of the pool is eligible for this request"

log = logging.getLogger(__name__)


class ExtProc(external_processor_pb2_grpc.ExternalProcessorServicer):
    """`fallbacks`: how many of the variant's other pods follow the pick in the answer. 0 by default: a
    gateway whose ORIGINAL_DST cluster reads the header (Envoy 1.40) cannot parse a list and answers 503,
    while an override_host gateway takes the list and retries down it. `bound`: the most bytes of a body
    held for a rewrite. `unchanged`: the model variants' requests sent as they came, by reason.
    `test_headers`: GIE's conformance test headers honoured (gateway/epp/conformance.py), off by default."""

    def __init__(
        self, picker: Picker, fallbacks: int = 0, bound: int = rewrite.BOUND, test_headers: bool = False
    ) -> None:
        self._picker, self._fallbacks, self._bound = picker, fallbacks, bound
        self._test_headers = test_headers
        self.unchanged: Counter[str] = Counter()

    async def Process(  # an async generator: grpc.aio serves a stream from one
        self, request_iterator: AsyncIterator[ext_proc.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ext_proc.ProcessingResponse]:
        ticket: Ticket | None = None
        held: bytearray | None = None  # a model variant's body so far, its headers' answer not yet sent
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                if kind == "request_headers":
                    headers, subset = protocol.headers(request.request_headers), protocol.subset_hint(request)
                    if self._test_headers:
                        chosen = conformance.selection(headers, self._picker.endpoints())
                        subset = conformance.narrow(subset, chosen)
                    ticket = self._picker.pick(headers, subset)
                    if ticket is None:
                        yield protocol.refuse(503, NOTHING_ELIGIBLE)
                        return
                    if ticket.model is not None and not request.request_headers.end_of_stream:
                        held = bytearray()
                        continue
                    if ticket.model is not None:
                        self._unchanged(ticket, "no body")
                    yield self._route(ticket)
                    continue
                if held is not None and ticket is not None:
                    if kind == "request_body":
                        held += request.request_body.body
                        if request.request_body.end_of_stream:
                            for answer in self._rewritten(ticket, bytes(held), True):
                                yield answer
                            held = None
                        elif len(held) > self._bound:
                            self._unchanged(ticket, "too large", f"over {self._bound} bytes")
                            yield self._route(ticket)
                            yield protocol.streamed(kind, bytes(held), False)
                            held = None
                        continue
                    if kind == "request_trailers":  # the body ended before them
                        for answer in self._rewritten(ticket, bytes(held), False):
                            yield answer
                        held = None
                served = protocol.served_endpoint(request) if kind == "response_headers" else None
                if served is not None and ticket is not None:
                    self._picker.served(ticket, served)
                if served is not None and self._test_headers:
                    yield protocol.add_header(str(kind), conformance.SERVED, served)
                elif kind in ("request_body", "response_body"):
                    body = getattr(request, kind)
                    yield protocol.echo(kind, body)
                else:
                    yield protocol.go_on(str(kind))
                if ticket is not None and _answer_ended(request):
                    self._picker.release(ticket)
        finally:
            if ticket is not None:
                self._picker.release(ticket)

    def _route(self, ticket: Ticket, length: int | None = None) -> ext_proc.ProcessingResponse:
        return protocol.route_to(ticket.endpoints[: 1 + self._fallbacks], length)

    def _rewritten(self, ticket: Ticket, body: bytes, end: bool) -> list[ext_proc.ProcessingResponse]:
        """The headers' answer and the whole body, rewritten where it can be, else as it came."""
        assert ticket.model is not None
        rewritten = rewrite.rewrite_model(body, ticket.model)
        if isinstance(rewritten, str):
            self._unchanged(ticket, rewritten)
            return [self._route(ticket), protocol.streamed("request_body", body, end)]
        return [self._route(ticket, len(rewritten)), protocol.streamed("request_body", rewritten, end)]

    def _unchanged(self, ticket: Ticket, reason: str, detail: str = "") -> None:
        log.warning(
            "model variant %s (%s): request sent unchanged, as the baseline's: body %s%s",
            ticket.variant,
            ticket.model,
            reason,
            f" ({detail})" if detail else "",
        )
        self.unchanged[reason] += 1
        self._picker.unchanged(ticket)


def _answer_ended(request: ext_proc.ProcessingRequest) -> bool:
    """The answer's last message: headers or a body chunk marked end_of_stream, or its trailers."""
    kind = request.WhichOneof("request")
    if kind == "response_trailers":
        return True
    if kind in ("response_headers", "response_body"):
        return bool(getattr(request, kind).end_of_stream)
    return False
