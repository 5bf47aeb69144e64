"""The ext_proc service: one gRPC stream per HTTP request, walked in Envoy's order (request headers, body
chunks, trailers; then the answer's). The variant is drawn on the request headers. Where the pod's choice
needs nothing more, the request is held for one Python call and never for its body; every body chunk is
echoed as it comes (FULL_DUPLEX_STREAMED), whatever it holds.

Where it wants the body (a model variant, whose requests' `model` is rewritten and served by the
baseline's pods; or a scorer that reads the prompt or the model, `prefix`, `lora` and `prefill`, weighted
above 0), the headers' answer waits for the whole body, up to `rewrite.BOUND`: one path holds it for
both. The pod is then placed with the body's JSON and the body sent back as one chunk (rewritten for a
model variant, its new length in the headers' answer). A body that cannot be read (too long, not JSON) is picked without
it and goes as it came, counted in `unread` and logged; a model variant's body that cannot be rewritten
(those, or no `model`) goes to the same pods counted as the baseline's, and `unchanged` says why. A
request is never refused for its body. The pod's count is released when the answer ends or, whatever
happens, when the stream closes. Each of these counts is exported too (gateway/epp/telemetry.py). The
request leaves its pod's pending prefill (gateway/epp/picker.py) at the answer's first body chunk, or at
its headers where the gateway streams no answer body here.

Every routed request is marked with the variant it is served as (`names.ROUTED_HEADER`: a model variant's
unchanged request as the baseline), so that the gateway's access log can place a model variant's answers,
which its pods (the baseline's) cannot (gateway/kubernetes/pool.py).

graystack's own Envoy names the variant its split chose in the stream's gRPC metadata
(gateway/envoy/picking.py): the picker ranks that variant's pods and draws no variant; where it knows no
pod of it, the request goes through unpicked, for the Envoy cluster's own policy to place."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from gateway.epp import conformance, protocol, rewrite, telemetry
from gateway.epp.picker import Draft, Picker, Ticket

NOTHING_ELIGIBLE = "no endpoint of the pool is eligible for this request"

log = logging.getLogger(__name__)


class ExtProc(external_processor_pb2_grpc.ExternalProcessorServicer):
    """`fallbacks`: how many of the variant's other pods follow the pick in the answer. 0 by default: a
    gateway whose ORIGINAL_DST cluster reads the header (Envoy 1.40) cannot parse a list and answers 503,
    while an override_host gateway takes the list and retries down it. `bound`: the most bytes of a body
    held before the pick. `unchanged`: the model variants' requests sent as they came, by reason;
    `unread`: the requests picked without the body a scorer wanted, by reason. `test_headers`: GIE's
    conformance test headers honoured (gateway/epp/conformance.py), off by default."""

    def __init__(
        self, picker: Picker, fallbacks: int = 0, bound: int = rewrite.BOUND, test_headers: bool = False
    ) -> None:
        self._picker, self._fallbacks, self._bound = picker, fallbacks, bound
        self._test_headers = test_headers
        self.unchanged: Counter[str] = Counter()
        self.unread: Counter[str] = Counter()

    async def Process(  # an async generator: grpc.aio serves a stream from one
        self, request_iterator: AsyncIterator[ext_proc.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ext_proc.ProcessingResponse]:
        ticket: Ticket | None = None
        draft: Draft | None = None  # drawn, its pod placed once the body is held (`held`)
        held: bytearray | None = None
        streams_answer = True  # the answer's body comes here: its first chunk, not its headers, starts it
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                if kind == "request_headers":
                    headers, subset = protocol.headers(request.request_headers), protocol.subset_hint(request)
                    streams_answer = protocol.answer_body_follows(request)
                    if self._test_headers:
                        chosen = conformance.selection(headers, self._picker.endpoints())
                        subset = conformance.narrow(subset, chosen)
                    routed = protocol.routed(context.invocation_metadata())
                    draft = self._picker.draw(headers, subset, routed)
                    if draft is None and routed is not None:  # graystack's Envoy: its cluster's policy serves
                        log.warning("variant %s: no pod of it known here; the request goes unpicked", routed)
                        yield protocol.go_on("request_headers")
                        continue
                    if draft is None:
                        yield protocol.refuse(503, NOTHING_ELIGIBLE)
                        return
                    if draft.wants_body and protocol.body_follows(request):
                        held = bytearray()
                        continue
                    ticket = self._picker.place(draft, None)
                    if ticket.model is not None:
                        self._unchanged(ticket, "no body")
                    yield self._route(ticket)
                    continue
                if held is not None and draft is not None:
                    answers: list[ext_proc.ProcessingResponse] = []
                    if kind == "request_body":
                        held += request.request_body.body
                        if request.request_body.end_of_stream:
                            ticket, answers = self._placed(draft, bytes(held), True)
                        elif len(held) > self._bound:
                            ticket = self._unread(draft, "too large", f"over {self._bound} bytes")
                            answers = [self._route(ticket), protocol.streamed(kind, bytes(held), False)]
                    elif kind == "request_trailers":  # the body ended before them
                        ticket, answers = self._placed(draft, bytes(held), False)
                    for answer in answers:
                        yield answer
                    if ticket is not None:
                        held = None
                    if kind == "request_body":
                        continue
                served = protocol.served_endpoint(request) if kind == "response_headers" else None
                if served is not None and ticket is not None:
                    self._picker.served(ticket, served)
                began = kind == "response_body" or (kind == "response_headers" and not streams_answer)
                if ticket is not None and began:
                    self._picker.started(ticket)
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
        """The headers' answer, once per routed request: counted by the variant it is served as."""
        telemetry.picked(ticket.variant, ticket.unmetered)
        return protocol.route_to(ticket.endpoints[: 1 + self._fallbacks], ticket.variant, length)

    def _placed(
        self, draft: Draft, body: bytes, end: bool
    ) -> tuple[Ticket, list[ext_proc.ProcessingResponse]]:
        """The pick made with the whole body, then the headers' answer and the body (rewritten for a model
        variant where it can be, else as it came), as one chunk."""
        document = rewrite.read(body)
        if isinstance(document, str):
            ticket = self._unread(draft, document)
            return ticket, [self._route(ticket), protocol.streamed("request_body", body, end)]
        ticket = self._picker.place(draft, document)
        if ticket.model is None:
            return ticket, [self._route(ticket), protocol.streamed("request_body", body, end)]
        rewritten = rewrite.rewrite_model(document, ticket.model)
        if isinstance(rewritten, str):
            self._unchanged(ticket, rewritten)
            return ticket, [self._route(ticket), protocol.streamed("request_body", body, end)]
        return ticket, [
            self._route(ticket, len(rewritten)),
            protocol.streamed("request_body", rewritten, end),
        ]

    def _unread(self, draft: Draft, reason: str, detail: str = "") -> Ticket:
        """The pick made without the body: counted and logged where a scorer wanted it."""
        if draft.reads_body:
            log.warning(
                "%s: request picked without its body: body %s%s",
                draft.variant,
                reason,
                f" ({detail})" if detail else "",
            )
            self.unread[reason] += 1
            telemetry.UNREAD.labels(reason).inc()
        ticket = self._picker.place(draft, None)
        if ticket.model is not None:
            self._unchanged(ticket, reason, detail)
        return ticket

    def _unchanged(self, ticket: Ticket, reason: str, detail: str = "") -> None:
        log.warning(
            "model variant %s (%s): request sent unchanged, as the baseline's: body %s%s",
            ticket.variant,
            ticket.model,
            reason,
            f" ({detail})" if detail else "",
        )
        self.unchanged[reason] += 1
        telemetry.UNCHANGED.labels(ticket.variant, reason).inc()
        self._picker.unchanged(ticket)


def _answer_ended(request: ext_proc.ProcessingRequest) -> bool:
    """The answer's last message: headers or a body chunk marked end_of_stream, or its trailers."""
    kind = request.WhichOneof("request")
    if kind == "response_trailers":
        return True
    if kind in ("response_headers", "response_body"):
        return bool(getattr(request, kind).end_of_stream)
    return False
