"""Envoy's own answers (local replies) in the API's error format, so each official SDK raises its usual
typed error instead of failing on `504 text/plain "upstream request timeout"`.

Envoy answers by itself when an attempt times out (504, `upstream_response_timeout` or
`upstream_per_try_idle_timeout`), when a variant has no healthy host (503, `no_healthy_upstream`), when a
circuit breaker overflows (503, flag UO), when a body is too large for a buffering filter (413), when
no route matches (404, flag NR: a path not in the API table, gateway/envoy/routes.py), and on the routes
that refuse (404: the servers' own routes, an API the table refuses; gateway/envoy/api_routes.py). The HCM's
`local_reply_config` rewrites those answers, the first mapper that matches winning:
  `/v1/messages*`   {"type":"error","error":{"type":...,"message":...}}           (Anthropic)
  any other path    {"error":{"message":...,"type":...,"param":null,"code":...}}  (OpenAI; `code` is
                    Envoy's response code details, e.g. `no_healthy_upstream`)
The status stays Envoy's, so the SDKs pick their class by it (anthropic: GatewayTimeoutError on 504,
ServiceUnavailableError on 503, NotFoundError on 404, ContentTooLargeError on 413; openai:
InternalServerError on 5xx, NotFoundError on 404).

`x-graystack-variant` names the variant the split chose (gateway/envoy/variant_header.py), not the
cluster; a reply before any cluster was chosen (no route) carries none. Checked against Envoy 1.40: both
the mapper's headers and ClusterWeight.response_headers_to_add reach the router's local replies; the
mapper's reach only local replies, so an upstream's own answer is never relabelled by them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import base_pb2, substitution_format_string_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import struct_pb2

from gateway.envoy.variant_header import chosen_header

ANTHROPIC_PREFIX = "/v1/messages"
# The path cut at 200 characters: a reply need not echo a client's 8 KiB path.
_NOT_ROUTED = "no route for %REQ(:METHOD)% %REQ(:PATH):200%: the gateway serves the inference API only"


@dataclass(frozen=True)
class _Kind:
    """One kind of local reply: how to recognise it, its error type in each API, and its message."""

    match: accesslog_pb2.AccessLogFilter
    anthropic: str
    openai: str
    message: str = "%LOCAL_REPLY_BODY%"


def _status(op: int, code: int) -> accesslog_pb2.AccessLogFilter:
    comparison = accesslog_pb2.ComparisonFilter(
        op=op, value=base_pb2.RuntimeUInt32(default_value=code, runtime_key=f"graystack.local_reply.{code}")
    )
    return accesslog_pb2.AccessLogFilter(
        status_code_filter=accesslog_pb2.StatusCodeFilter(comparison=comparison)
    )


def _flag(flag: str) -> accesslog_pb2.AccessLogFilter:
    return accesslog_pb2.AccessLogFilter(response_flag_filter=accesslog_pb2.ResponseFlagFilter(flags=[flag]))


def _either(*filters: accesslog_pb2.AccessLogFilter) -> accesslog_pb2.AccessLogFilter:
    return accesslog_pb2.AccessLogFilter(or_filter=accesslog_pb2.OrFilter(filters=filters))


_EQ, _GE = accesslog_pb2.ComparisonFilter.EQ, accesslog_pb2.ComparisonFilter.GE

# In order: the first that matches names the error. Anthropic's types are its API's (and graystack's own
# server's, inference/server/errors.py); OpenAI's are the two its API answers with.
KINDS = (
    _Kind(_flag("NR"), "not_found_error", "invalid_request_error", _NOT_ROUTED),
    _Kind(_flag("UO"), "overloaded_error", "server_error"),
    _Kind(_status(_EQ, 404), "not_found_error", "invalid_request_error"),
    _Kind(_status(_EQ, 413), "request_too_large", "invalid_request_error"),
    _Kind(_either(_status(_EQ, 504), _status(_EQ, 408)), "timeout_error", "server_error"),
    _Kind(_status(_GE, 500), "api_error", "server_error"),
    _Kind(_status(_GE, 400), "invalid_request_error", "invalid_request_error"),
)


def _anthropic_body(kind: _Kind) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind.anthropic, "message": kind.message}}


def _openai_body(kind: _Kind) -> dict[str, Any]:
    return {
        "error": {
            "message": kind.message,
            "type": kind.openai,
            "param": None,
            "code": "%RESPONSE_CODE_DETAILS%",
        }
    }


def _mapper(match: accesslog_pb2.AccessLogFilter, body: dict[str, Any]) -> hcm_pb2.ResponseMapper:
    json_format = struct_pb2.Struct()
    json_format.update(body)
    return hcm_pb2.ResponseMapper(
        filter=match,
        body_format_override=substitution_format_string_pb2.SubstitutionFormatString(json_format=json_format),
        headers_to_add=[chosen_header()],
    )


def build_local_reply_config() -> hcm_pb2.LocalReplyConfig:
    """Anthropic's error format on `/v1/messages*`, OpenAI's on every other path."""
    anthropic_path = accesslog_pb2.AccessLogFilter(
        header_filter=accesslog_pb2.HeaderFilter(
            header=route_components_pb2.HeaderMatcher(
                name=":path", string_match=string_pb2.StringMatcher(prefix=ANTHROPIC_PREFIX)
            )
        )
    )
    anthropic = [
        _mapper(
            accesslog_pb2.AccessLogFilter(
                and_filter=accesslog_pb2.AndFilter(filters=[anthropic_path, kind.match])
            ),
            _anthropic_body(kind),
        )
        for kind in KINDS
    ]
    openai = [_mapper(kind.match, _openai_body(kind)) for kind in KINDS]
    return hcm_pb2.LocalReplyConfig(mappers=anthropic + openai)
