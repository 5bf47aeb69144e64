"""An access-log entry (envoy.data.accesslog.v3.HTTPAccessLogEntry) to an `Answer`, or None for an entry
that is not a variant's answer. Pure: the receiver (receiver.py) feeds it, the unit tests too.

What the answer filter wrote (gateway/envoy/answer_filter.py) and what Envoy recorded are read together:
the filter's `end` is missing exactly when the stream was reset, and Envoy's response flags say by whom.

The user's own gateway (issue 36) logs through the same service, but its routes and clusters are its own:
there a `Placement` names the variant by the endpoint that served the answer (its upstream host), and
the segment by the routing header the log carries. Where no answer filter is attached to that gateway,
an entry has no `end`: what the log alone gives is kept (status, duration, bytes; a reset from Envoy's
flags), and no first token, tokens or finish."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol

from envoy.data.accesslog.v3 import accesslog_pb2
from google.protobuf import json_format

from gateway import names
from gateway.answers.answer import Answer, Api, Ending, finish_of
from gateway.answers.capture import captured
from gateway.spec.model import Routing
from inference.prompt_buckets import prompt_bucket

_FALLBACK_SUFFIX = names.fallback_cluster("")
_SHADOW_SUFFIX = names.shadow_cluster("")
# The API table's kinds (gateway/spec/apis.py) as the answers' `api` label names them.
_APIS: dict[str, Api] = {
    "openai_chat": "chat",
    "anthropic_messages": "messages",
    "openai_completions": "completions",
    "anthropic_count_tokens": "count_tokens",
    "openai_responses": "responses",
    "openai_embeddings": "embeddings",
}
_EVERY_CHECK = ("other", frozenset({"errors", "latency"}))


class Placement(Protocol):
    """The variant and segment of an answer the user's gateway logged (gateway/kubernetes/gateway_api.py,
    gateway/kubernetes/pool.py). `variant`: by the endpoint that served it, and, where graystack's picker
    chose it, the variant the picker marked the request with (`names.ROUTED_HEADER`, in `headers`); None
    where the upstream host ("" for none) is no variant's endpoint."""

    def variant(self, upstream_host: str, headers: Mapping[str, str]) -> str | None: ...

    def segment(self, headers: Mapping[str, str]) -> str: ...


def segment_of(routing: Routing, headers: Mapping[str, str]) -> str:
    """The segment of a request the user's gateway logged: its routing header's value where a rule has
    it (the log carries the header: the EnvoyProxy ALS sink's `requestHeaders`), else the default."""
    wanted = routing.header.lower()
    value = next((v for k, v in headers.items() if k.lower() == wanted), None)
    return value if value in {rule.value for rule in routing.rules} else names.DEFAULT_SEGMENT


def upstream_host(entry: accesslog_pb2.HTTPAccessLogEntry) -> str:
    """`10.0.0.5:8000` (`[fd00::5]:8000`), or "" where the request reached no upstream."""
    socket = entry.common_properties.upstream_remote_address.socket_address
    if not socket.address:
        return ""
    host = f"[{socket.address}]" if ":" in socket.address else socket.address
    return f"{host}:{socket.port_value}"


def variant_of(cluster: str) -> str:
    """The variant a routed cluster carries: `<variant>-with-fallback` is `<variant>`'s."""
    return cluster.removesuffix(_FALLBACK_SUFFIX)


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value >= 0 else None


def _seconds(at_us: int | None, since_us: int) -> float | None:
    """None where unknown, or where the clock went back between the two readings."""
    return (at_us - since_us) / 1e6 if at_us is not None and at_us >= since_us else None


def client_digest(key: str) -> int:
    """A client key as 64 bits: enough to tell a rollout's clients apart (a collision among a million
    has odds of about 3e-8), and no user id kept in memory."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def _ending(end: dict[str, Any] | None, status: int, flags: accesslog_pb2.ResponseFlags) -> Ending:
    if end is None:  # the filter never saw the last byte: the stream was reset
        gone = flags.downstream_connection_termination or flags.downstream_remote_reset
        return "client_gone" if gone else "cut"
    if end.get("error") or status >= 400:
        return "error"
    if end.get("sse") is True and end.get("final") is not True:
        return "cut"
    return "complete"


def _request_fields(entry: accesslog_pb2.HTTPAccessLogEntry) -> dict[str, Any]:
    """What json_to_metadata read of the request's body (gateway/envoy/capture.py); empty where it did not."""
    read = entry.common_properties.metadata.filter_metadata.get(names.CAPTURE_REQUEST_METADATA)
    fields = json_format.MessageToDict(read) if read is not None else {}
    temperature = fields.get("temperature")
    response_format = fields.get("response_format")
    return {
        "temperature": float(temperature) if isinstance(temperature, int | float) else None,
        "response_format": response_format if isinstance(response_format, str) else None,
        "schema_given": fields.get("schema") is True,
        "tools": fields.get("tools") is True,
    }


def _captured_fields(end: dict[str, Any]) -> dict[str, Any]:
    """The answer's captured content (gateway/answers/capture.py); nothing where it was not sampled."""
    kept = end.get("capture")
    if not isinstance(kept, dict):
        return {}
    content = captured(kept)
    return {
        "captured": True,
        "text": content.text,
        "calls": content.calls,
        "truncated": content.truncated,
        "text_unreadable": content.unreadable,
    }


def _reset(flags: accesslog_pb2.ResponseFlags) -> bool:
    """Envoy's own word that the stream was cut (where no filter saw its last byte)."""
    return bool(
        flags.upstream_connection_termination
        or flags.upstream_remote_reset
        or flags.upstream_request_timeout
        or flags.downstream_connection_termination
        or flags.downstream_remote_reset
        or flags.stream_idle_timeout
    )


def answer_from(
    entry: accesslog_pb2.HTTPAccessLogEntry, shadow: bool = False, placement: Placement | None = None
) -> Answer | None:
    """The entry's answer; None where no cluster was chosen (no route, a refusal) or where its route feeds
    no checks (a pinned API, an unknown path sent to the baseline: not a variant's answer). The route's
    name (gateway/envoy/api_routes.py) gives its API and whether it feeds the latency checks: an API
    without a first token (embeddings) gets no TTFT nor time per token. The log holds only POSTs.
    `shadow`: the entry came on the mirrored copies' log, whose cluster is `<variant>-shadow`.
    `placement`: the entry came from the user's gateway; None where its upstream host is no variant's."""
    common = entry.common_properties
    cluster = common.upstream_cluster
    kind, checks = names.api_of_route(common.route_name) or _EVERY_CHECK
    if placement is not None:
        placed = placement.variant(upstream_host(entry), entry.request.request_headers)
        if placed is None:
            return None
        variant = placed
    elif not cluster or "errors" not in checks:
        return None
    else:
        # A mirrored copy carries its original's choice in x-graystack-routed; its cluster is
        # `<variant>-shadow`. After a fallback retry, the logged cluster is the fallback's; the split's
        # choice is in the header.
        routed = entry.request.request_headers.get(names.ROUTED_HEADER)
        variant = cluster.removesuffix(_SHADOW_SUFFIX) if shadow else routed or variant_of(cluster)
    latency = "latency" in checks
    measured = common.metadata.filter_metadata.get(names.ANSWER_METADATA)
    fields = json_format.MessageToDict(measured) if measured is not None else {}
    end = fields.get("end")
    status = entry.response.response_code.value
    if placement is not None and measured is None:  # no answer filter on the user's gateway
        end = None if _reset(common.response_flags) else {}
    ending = _ending(end if isinstance(end, dict) else None, status, common.response_flags)
    end = end if isinstance(end, dict) else {}
    started_us = common.start_time.ToMicroseconds()
    first_us, last_us = _count(fields.get("first_us")), _count(end.get("last_us"))
    content = _count(end.get("content")) or 0
    output = _count(end.get("output"))
    streamed = end.get("sse") is True
    # without `usage`, a stream's content events are its tokens; a whole body's words are not
    tokens = output if output is not None else (content if streamed else None)
    itl = None
    if (
        latency
        and streamed
        and tokens is not None
        and tokens >= 2
        and first_us is not None
        and last_us is not None
    ):
        itl = (last_us - first_us) / 1e6 / (tokens - 1)
    body_bytes = entry.request.request_body_bytes
    keyed = common.metadata.filter_metadata.get(names.AFFINITY_METADATA)
    source = json_format.MessageToDict(keyed).get("source") if keyed is not None else None
    error_type = end.get("error")
    # the key the affinity filter wrote (it drops any a client sent); a mirrored copy carries it too
    key = entry.request.request_headers.get(names.AFFINITY_HEADER)
    headers = entry.response.response_headers
    return Answer(
        variant=variant,
        answered_by=headers.get(names.VARIANT_HEADER) or None,
        named=headers.get(names.SERVER_VARIANT_HEADER) or None,
        segment=placement.segment(entry.request.request_headers)
        if placement is not None
        else entry.request.request_headers.get(names.SEGMENT_HEADER, names.DEFAULT_SEGMENT),
        api=_APIS.get(kind, "other"),
        streamed=streamed,
        status=status,
        prompt_bytes=body_bytes,
        prompt_bucket=prompt_bucket(body_bytes),
        started_at=started_us / 1e6,
        ttft=_seconds(first_us, started_us) if latency and (not end or content) else None,
        itl=itl,
        duration=(
            common.time_to_last_downstream_tx_byte.ToMicroseconds() / 1e6
            if common.HasField("time_to_last_downstream_tx_byte")
            else None
        ),
        input_tokens=_count(end.get("input")),
        output_tokens=tokens,
        tokens_counted=output is None and tokens is not None,
        finish=finish_of(end.get("finish") if isinstance(end.get("finish"), str) else None, ending),
        ending=ending,
        error_type=str(error_type) if error_type else None,
        unreadable=sum(_count(end.get(key)) or 0 for key in ("unknown", "malformed", "parse_errors")),
        shadow=shadow,
        affinity=source if isinstance(source, str) else None,
        client=client_digest(key) if key else None,
        request_id=entry.request.request_id or None,
        **_captured_fields(end),
        **_request_fields(entry),
    )
