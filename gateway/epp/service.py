"""The ext_proc service: one gRPC stream per HTTP request, walked in Envoy's order (request headers, body
chunks, trailers; then the answer's). The pick is made on the request headers, so the request is held
for one Python call and never for its body; every body chunk is echoed as it comes (FULL_DUPLEX_STREAMED),
whatever it holds: a body that is not JSON is routed like any other. The pod's count is released when the
answer ends or, whatever happens, when the stream closes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from gateway.epp import protocol
from gateway.epp.picker import Picker, Ticket

NOTHING_ELIGIBLE = "no endpoint of the pool is eligible for this request"


class ExtProc(external_processor_pb2_grpc.ExternalProcessorServicer):
    """`fallbacks`: how many of the variant's other pods follow the pick in the answer. 0 by default: a
    gateway whose ORIGINAL_DST cluster reads the header (Envoy 1.40) cannot parse a list and answers 503,
    while an override_host gateway takes the list and retries down it."""

    def __init__(self, picker: Picker, fallbacks: int = 0) -> None:
        self._picker, self._fallbacks = picker, fallbacks

    async def Process(  # an async generator: grpc.aio serves a stream from one
        self, request_iterator: AsyncIterator[ext_proc.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ext_proc.ProcessingResponse]:
        ticket: Ticket | None = None
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                if kind == "request_headers":
                    ticket = self._picker.pick(
                        protocol.headers(request.request_headers), protocol.subset_hint(request)
                    )
                    if ticket is None:
                        yield protocol.refuse(503, NOTHING_ELIGIBLE)
                        return
                    yield protocol.route_to(ticket.endpoints[: 1 + self._fallbacks])
                    continue
                if kind == "response_headers" and ticket is not None:
                    served = protocol.served_endpoint(request)
                    if served is not None:
                        self._picker.served(ticket, served)
                if kind in ("request_body", "response_body"):
                    body = getattr(request, kind)
                    yield protocol.echo(kind, body)
                else:
                    yield protocol.go_on(str(kind))
                if ticket is not None and _answer_ended(request):
                    self._picker.release(ticket)
        finally:
            if ticket is not None:
                self._picker.release(ticket)


def _answer_ended(request: ext_proc.ProcessingRequest) -> bool:
    """The answer's last message: headers or a body chunk marked end_of_stream, or its trailers."""
    kind = request.WhichOneof("request")
    if kind == "response_trailers":
        return True
    if kind in ("response_headers", "response_body"):
        return bool(getattr(request, kind).end_of_stream)
    return False
