"""GIE's Endpoint Picker protocol v1.0.0 on Envoy's ext_proc messages (pure): what the gateway tells the
picker (headers, the subset hint, the endpoint that served) and what the picker answers (the endpoints in
a header and in `envoy.lb` metadata, the same value in both; a refusal; body chunks echoed, as
FULL_DUPLEX_STREAMED asks of every processor). Beside the protocol, graystack's own mark: the variant the
picker drew, in `names.ROUTED_HEADER` (overwriting any copy a client sent), which the gateway's access log
carries to the answer receiver. The protocol's text:
../shared/schemas/inference-extension/endpoint-picker-protocol.md."""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from gateway import names

DESTINATION = names.EPP_DESTINATION  # the header, and the key in LB_NAMESPACE
SERVED = "x-gateway-destination-endpoint-served"  # the gateway's answer, in LB_NAMESPACE
LB_NAMESPACE = names.EPP_LB_NAMESPACE
SUBSET_NAMESPACE = names.EPP_SUBSET_NAMESPACE
SUBSET = "x-gateway-destination-endpoint-subset"


def headers(message: ext_proc.HttpHeaders) -> dict[str, str]:
    """The request's headers, names lower-cased (HTTP/2's form); Envoy sends values as `raw_value`."""
    return {
        header.key.lower(): header.raw_value.decode(errors="replace") if header.raw_value else header.value
        for header in message.headers.headers
    }


def _metadata(request: ext_proc.ProcessingRequest, namespace: str, key: str) -> struct_pb2.Value | None:
    fields = request.metadata_context.filter_metadata
    if namespace not in fields or key not in fields[namespace].fields:
        return None
    return fields[namespace].fields[key]


def subset_hint(request: ext_proc.ProcessingRequest) -> frozenset[str] | None:
    """The endpoints the gateway allows (an empty set: none), or None when it sets no hint."""
    value = _metadata(request, SUBSET_NAMESPACE, SUBSET)
    if value is None:
        return None
    return frozenset(item.string_value for item in value.list_value.values if item.string_value)


def routed(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The variant graystack's own Envoy routed the request to, from the stream's gRPC metadata (set by
    its route, never by a client: gateway/envoy/picking.py); None from any other gateway."""
    for key, value in metadata or ():
        if key == names.ROUTED_HEADER:
            return value.decode() if isinstance(value, bytes) else value
    return None


def body_follows(request: ext_proc.ProcessingRequest) -> bool:
    """The request headers' message is followed by body messages: the request has a body, and the gateway
    sends bodies (its first message says how, where it says: graystack's own Envoy sends none,
    gateway/envoy/picking.py)."""
    if request.request_headers.end_of_stream:
        return False
    config = request.protocol_config
    return not request.HasField("protocol_config") or config.request_body_mode != mode_pb2.ProcessingMode.NONE


def answer_body_follows(request: ext_proc.ProcessingRequest) -> bool:
    """The gateway will send the answer's body too (a GIE gateway's FULL_DUPLEX_STREAMED), so its first
    chunk, not its headers, tells when the pod began to answer; not where the first message says it
    sends none (graystack's own Envoy, gateway/envoy/picking.py)."""
    sends = request.protocol_config.response_body_mode != mode_pb2.ProcessingMode.NONE
    return not request.HasField("protocol_config") or sends


def served_endpoint(request: ext_proc.ProcessingRequest) -> str | None:
    """The endpoint that served, where the gateway reports it (override_host's `selected_host_key`)."""
    value = _metadata(request, LB_NAMESPACE, SERVED)
    return value.string_value or None if value is not None else None


def route_to(
    endpoints: Sequence[str], variant: str, length: int | None = None
) -> ext_proc.ProcessingResponse:
    """The request headers' answer: the picked endpoint first, the fallbacks after it, comma-separated, in
    the header and in the metadata alike (the protocol forbids the two to differ), and the request marked
    with the variant it is served as. `length`: the body's new `content-length`, where the picker
    rewrote the body."""
    value = ",".join(endpoints)
    mutation = ext_proc.HeaderMutation(
        set_headers=[_header(DESTINATION, value), _header(names.ROUTED_HEADER, variant)]
    )
    if length is not None:
        mutation.set_headers.append(_header("content-length", str(length)))
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION: value}})
    return ext_proc.ProcessingResponse(
        request_headers=ext_proc.HeadersResponse(
            response=ext_proc.CommonResponse(header_mutation=mutation, clear_route_cache=True)
        ),
        dynamic_metadata=metadata,
    )


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def refuse(code: int, reason: str) -> ext_proc.ProcessingResponse:
    """An ImmediateResponse: 503 when nothing is eligible, 429 when shedding."""
    return ext_proc.ProcessingResponse(
        immediate_response=ext_proc.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=code),
            body=reason.encode(),
            details=f"graystack_epp_{code}",
        )
    )


def echo(kind: str, body: ext_proc.HttpBody) -> ext_proc.ProcessingResponse:
    """A body chunk handed back unchanged (`kind`: request_body or response_body)."""
    return streamed(kind, body.body, body.end_of_stream)


def streamed(kind: str, data: bytes, end_of_stream: bool) -> ext_proc.ProcessingResponse:
    """Body bytes handed back (FULL_DUPLEX_STREAMED): held chunks, or a rewritten body, as one chunk."""
    streamed = ext_proc.StreamedBodyResponse(body=data, end_of_stream=end_of_stream)
    common = ext_proc.CommonResponse(body_mutation=ext_proc.BodyMutation(streamed_response=streamed))
    return ext_proc.ProcessingResponse(**{kind: ext_proc.BodyResponse(response=common)})


def go_on(kind: str) -> ext_proc.ProcessingResponse:
    """Headers or trailers let through unchanged (`kind`: response_headers, request_trailers, ...)."""
    answer = ext_proc.TrailersResponse() if kind.endswith("trailers") else ext_proc.HeadersResponse()
    return ext_proc.ProcessingResponse(**{kind: answer})


def add_header(kind: str, key: str, value: str) -> ext_proc.ProcessingResponse:
    """Headers let through with one header set (`kind`: response_headers or request_headers)."""
    mutation = ext_proc.HeaderMutation(set_headers=[_header(key, value)])
    answer = ext_proc.HeadersResponse(response=ext_proc.CommonResponse(header_mutation=mutation))
    return ext_proc.ProcessingResponse(**{kind: answer})
