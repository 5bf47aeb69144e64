"""Envoy's own answers rewritten into the API's error JSON, chosen by the request's path."""

import json

from envoy.config.accesslog.v3 import accesslog_pb2
from google.protobuf.json_format import MessageToDict

from gateway.envoy.local_replies import KINDS, build_local_reply_config
from gateway.envoy.variant_header import variant_metadata


def body(mapper) -> dict:
    return MessageToDict(mapper.body_format_override.json_format)


def is_anthropic(mapper) -> bool:
    """Whether the mapper applies to `/v1/messages*` only."""
    if not mapper.filter.HasField("and_filter"):
        return False
    path = mapper.filter.and_filter.filters[0].header_filter.header
    return path.name == ":path" and path.string_match.prefix == "/v1/messages"


def test_anthropic_paths_get_anthropic_errors_and_every_other_path_openai_errors():
    mappers = build_local_reply_config().mappers
    anthropic, openai = mappers[: len(KINDS)], mappers[len(KINDS) :]
    assert all(is_anthropic(m) for m in anthropic)  # first: the first mapper that matches wins
    assert not any(is_anthropic(m) for m in openai)
    for mapper in anthropic:
        reply = body(mapper)
        assert reply["type"] == "error"
        assert set(reply["error"]) == {"type", "message"}
    for mapper in openai:
        error = body(mapper)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["param"] is None
        assert error["code"] == "%RESPONSE_CODE_DETAILS%"  # e.g. no_healthy_upstream


def kind_of(status: int, flag: str = "-") -> tuple[str, str]:
    """(anthropic type, openai type) of the first kind whose filter takes a reply of `status` and `flag`."""
    for kind in KINDS:
        if matches(kind.match, status, flag):
            return kind.anthropic, kind.openai
    raise AssertionError(f"no mapper for {status} {flag}")


def matches(match: accesslog_pb2.AccessLogFilter, status: int, flag: str) -> bool:
    which = match.WhichOneof("filter_specifier")
    if which == "or_filter":
        return any(matches(f, status, flag) for f in match.or_filter.filters)
    if which == "response_flag_filter":
        return flag in match.response_flag_filter.flags
    comparison = match.status_code_filter.comparison
    value = comparison.value.default_value
    return status == value if comparison.op == comparison.EQ else status >= value


def test_each_envoy_reply_gets_the_type_its_sdk_expects():
    assert kind_of(504) == ("timeout_error", "server_error")  # upstream request timeout
    assert kind_of(503) == ("api_error", "server_error")  # no healthy upstream
    assert kind_of(503, "UO") == ("overloaded_error", "server_error")  # a circuit breaker overflowed
    assert kind_of(413) == ("request_too_large", "invalid_request_error")
    assert kind_of(404, "NR") == ("not_found_error", "invalid_request_error")
    assert kind_of(400) == ("invalid_request_error", "invalid_request_error")


def test_an_unrouted_request_is_told_what_it_asked_for():
    (unrouted,) = [k for k in KINDS if k.match.response_flag_filter.flags == ["NR"]]
    assert "%REQ(:METHOD)% %REQ(:PATH):200%" in unrouted.message


def test_every_reply_names_the_chosen_variant_from_the_clusters_metadata():
    for mapper in build_local_reply_config().mappers:
        (header,) = mapper.headers_to_add
        assert header.header.key == "x-graystack-variant"
        assert header.header.value == "%CLUSTER_METADATA(graystack:variant)%"
        assert header.append_action == header.OVERWRITE_IF_EXISTS_OR_ADD  # over the answering host's
    metadata = MessageToDict(variant_metadata("zero-layer"))
    assert metadata == {"filterMetadata": {"graystack": {"variant": "zero-layer"}}}
    assert json.dumps(metadata)  # plain data, as Envoy's config dump shows it
