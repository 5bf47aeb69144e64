"""Access-log entries to answers, the store's cursor and bound, the receiver's tolerance of bad entries, and
where the builders put the measurement (the Lua filter itself runs only in Envoy:
tests/integration/test_answers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2 as als_config_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.service.accesslog.v3 import als_pb2
from google.protobuf import struct_pb2

from gateway import names
from gateway.answers.entries import answer_from
from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from tests.unit.test_envoy_builders import build

START_US = 1_800_000_000_000_000


def entry(
    end: dict | None = None,
    first_ms: float | None = 250.0,
    cluster: str = "zero-layer-with-fallback",
    status: int = 200,
    kind: str = "openai_chat",
    checks: tuple[str, ...] = ("errors", "latency"),
    **flags: bool,
) -> accesslog_pb2.HTTPAccessLogEntry:
    """An entry as Envoy sends it for one answer: `end` is what the answer filter wrote at the last byte."""
    log = accesslog_pb2.HTTPAccessLogEntry()
    common = log.common_properties
    common.start_time.FromMicroseconds(START_US)
    common.upstream_cluster = cluster
    for flag, value in flags.items():
        setattr(common.response_flags, flag, value)
    measured: dict = {}
    if first_ms is not None:
        measured["first_us"] = START_US + first_ms * 1000
    if end is not None:
        measured["end"] = end
    if measured:
        metadata = struct_pb2.Struct()
        metadata.update(measured)
        common.metadata.filter_metadata[names.ANSWER_METADATA].CopyFrom(metadata)
    common.route_name = names.api_route("mobile POST /some/path", kind, checks)
    log.request.request_body_bytes = 300
    log.request.request_headers[names.SEGMENT_HEADER] = "mobile"
    log.response.response_code.value = status
    log.response.response_headers[names.VARIANT_HEADER] = "baseline"
    return log


STREAM = {"sse": True, "final": True, "content": 5, "last_us": START_US + 650_000, "finish": "stop"}


def test_a_complete_stream_without_usage_counts_its_content_events():
    answer = answer_from(entry(STREAM))
    assert answer is not None
    assert (answer.variant, answer.answered_by, answer.segment, answer.api) == (
        "zero-layer",
        "baseline",
        "mobile",
        "chat",
    )
    assert (answer.prompt_bytes, answer.prompt_bucket, answer.streamed) == (300, "129-512", True)
    assert answer.ttft == pytest.approx(0.25)
    assert answer.itl == pytest.approx(0.1)  # 400 ms over the 4 tokens after the first
    assert (answer.output_tokens, answer.tokens_counted, answer.input_tokens) == (5, True, None)
    assert (answer.finish, answer.ending, answer.failed) == ("stop", "complete", False)


def test_usage_wins_over_counted_events_and_reasons_are_named_alike():
    answer = answer_from(
        entry({**STREAM, "output": 9, "input": 40, "finish": "max_tokens"}, kind="anthropic_messages")
    )
    assert answer is not None
    assert (answer.api, answer.output_tokens, answer.input_tokens, answer.tokens_counted) == (
        "messages",
        9,
        40,
        False,
    )
    assert answer.itl == pytest.approx(0.05)
    assert answer.finish == "length"
    assert answer_from(entry({**STREAM, "finish": "tool_use"})).finish == "tool_call"  # type: ignore[union-attr]
    assert answer_from(entry({**STREAM, "finish": "something_new"})).finish == "other"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("end", "status", "flags", "ending", "failed"),
    [
        ({**STREAM, "final": False}, 200, {}, "cut", True),  # ended before [DONE] / message_stop
        ({**STREAM, "error": "overloaded_error"}, 200, {}, "error", True),  # an error event after 200
        (None, 200, {"upstream_connection_termination": True}, "cut", True),  # reset: the filter never ended
        (None, 200, {"downstream_connection_termination": True}, "client_gone", False),
        (None, 200, {"downstream_remote_reset": True}, "client_gone", False),
        ({"sse": False, "content": 0}, 503, {}, "error", True),
        ({"sse": False, "content": 0, "error": "invalid_request_error"}, 400, {}, "error", False),
    ],
)
def test_how_a_stream_ended(end, status, flags, ending, failed):
    answer = answer_from(entry(end, status=status, **flags))
    assert answer is not None
    assert (answer.ending, answer.failed) == (ending, failed)
    if ending == "error":
        assert answer.finish == "error"


def test_an_error_body_has_no_first_token_and_a_body_that_is_not_json_no_tokens():
    error = answer_from(entry({"sse": False, "content": 0, "error": "x"}, status=500))
    assert error is not None
    assert error.ttft is None
    plain = answer_from(entry({"sse": False, "content": 0}))
    assert plain is not None
    assert (plain.output_tokens, plain.itl, plain.ending) == (None, None, "complete")


def test_an_api_that_feeds_no_latency_checks_has_no_first_token_nor_time_per_token():
    answer = answer_from(entry({**STREAM, "output": 3}, kind="openai_embeddings", checks=("errors",)))
    assert answer is not None
    assert (answer.api, answer.ttft, answer.itl, answer.ending) == ("embeddings", None, None, "complete")
    failed = answer_from(entry({"sse": False, "error": "server_error"}, status=500, checks=("errors",)))
    assert failed is not None
    assert failed.failed


def test_a_pinned_or_unknown_paths_answer_is_no_variants_answer():
    assert answer_from(entry(STREAM, cluster="baseline-models", kind="models", checks=())) is None
    assert answer_from(entry(STREAM, cluster="baseline-models", kind="other", checks=())) is None


def test_an_entry_without_a_cluster_is_no_answer():
    assert answer_from(entry(STREAM, cluster="")) is None  # no route: Envoy's 404


def test_metadata_of_the_wrong_shape_is_read_as_far_as_it_goes():
    answer = answer_from(entry({"sse": "yes", "content": "many", "output": -3, "finish": 7}, first_ms=None))
    assert answer is not None
    assert (answer.output_tokens, answer.finish, answer.ttft) == (None, None, None)


def routed(log: accesslog_pb2.HTTPAccessLogEntry, chose: str, host: str, named: str | None):
    """`log` as Envoy logs it when the split chose `chose`, a host of `host` answered, and the server
    named itself `named` (Envoy's x-graystack-variant names the host's variant, over the server's)."""
    log.request.request_headers[names.ROUTED_HEADER] = chose
    log.common_properties.upstream_cluster = host  # after a fallback retry: the fallback's, not the aggregate
    log.response.response_headers[names.VARIANT_HEADER] = host
    if named is not None:
        log.response.response_headers[names.SERVER_VARIANT_HEADER] = named
    return log


@pytest.mark.parametrize(
    ("chose", "host", "named", "server", "fell_back", "misnamed"),
    [
        ("b", "b", "baseline", "b", False, "baseline"),  # an A/A run: a graystack server behind variant b
        ("b", "b", None, "b", False, None),  # a server that names itself nothing (vLLM)
        ("b", "b", "b", "b", False, None),
        ("b", "a", "baseline", "a", True, "baseline"),  # b failed, a's host answered after the retry
    ],
)
def test_an_answer_is_the_chosen_variants_and_its_server_is_the_host_envoy_sent_it_to(
    chose, host, named, server, fell_back, misnamed
):
    answer = answer_from(routed(entry(STREAM), chose, host, named))
    assert answer is not None
    assert (answer.variant, answer.server, answer.named) == (chose, server, named)
    assert (answer.fell_back, answer.misnamed) == (fell_back, misnamed)


def test_the_store_counts_servers_that_name_themselves_otherwise_by_variant_and_name():
    store = AnswerStore()
    for chose, host, named in [
        ("a", "a", "baseline"),
        ("b", "b", "baseline"),
        ("b", "b", "b"),
        ("b", "a", "v1"),
    ]:
        answer = answer_from(routed(entry(STREAM), chose, host, named))
        assert answer is not None
        store.add(answer, now=1.0)
    assert store.misnamed == {("a", "baseline"): 1, ("b", "baseline"): 1, ("a", "v1"): 1}


def test_the_store_pages_by_cursor_and_counts_what_it_evicts():
    store = AnswerStore(capacity=3)
    one = answer_from(entry(STREAM))
    assert one is not None
    for _ in range(2):
        store.add(one, now=1.0)
    first = store.since(0)
    assert (len(first.answers), first.cursor, first.missed) == (2, 2, 0)
    for _ in range(3):
        store.add(one, now=2.0)
    later = store.since(first.cursor)
    assert (len(later.answers), later.cursor, later.missed) == (3, 5, 0)
    behind = store.since(0)  # a reader that never read: two were evicted before it looked
    assert (len(behind.answers), behind.missed) == (3, 2)
    assert (store.counts.kept, store.counts.evicted, store.cursor) == (5, 2, 5)


def test_the_store_holds_at_most_its_budget_of_captured_text():
    from dataclasses import replace

    one = answer_from(entry(STREAM))
    assert one is not None
    store = AnswerStore(text_budget=1000)
    for _ in range(5):
        store.add(replace(one, captured=True, text="x" * 300), now=1.0)
    kept = store.since(0)
    assert (len(kept.answers), kept.missed, store.counts.evicted) == (3, 2, 2)  # 900 bytes held
    store.add(one, now=1.0)  # no text: costs none
    assert len(store.since(0).answers) == 4


async def messages(*items: als_pb2.StreamAccessLogsMessage) -> AsyncIterator[als_pb2.StreamAccessLogsMessage]:
    for item in items:
        yield item


def message(
    log_name: str | None, *entries: accesslog_pb2.HTTPAccessLogEntry
) -> als_pb2.StreamAccessLogsMessage:
    sent = als_pb2.StreamAccessLogsMessage()
    if log_name is not None:
        sent.identifier.log_name = log_name
    sent.http_logs.log_entry.extend(entries)
    return sent


def test_the_receiver_keeps_answers_ignores_other_logs_and_survives_bad_entries(monkeypatch):
    store = AnswerStore()
    receiver = AnswerReceiver(store)
    ours = [message(names.ANSWER_LOG, entry(STREAM), entry(STREAM, cluster="")), message(None, entry(STREAM))]
    asyncio.run(receiver.StreamAccessLogs(messages(*ours), None))
    asyncio.run(receiver.StreamAccessLogs(messages(message("someone-elses", entry(STREAM))), None))
    assert (store.counts.kept, store.counts.ignored, store.counts.unreadable) == (2, 1, 0)

    def broken(_: object) -> None:
        raise ValueError("no such field")

    monkeypatch.setattr("gateway.answers.receiver.answer_from", broken)
    asyncio.run(
        receiver.StreamAccessLogs(messages(message(names.ANSWER_LOG, entry(STREAM), entry(STREAM))), None)
    )
    assert (store.counts.unreadable, store.counts.received) == (2, 5)


def test_the_listener_measures_before_routing_and_logs_posts_to_the_xds_cluster():
    (listener,) = build().listeners
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    assert [f.name for f in manager.http_filters] == ["envoy.filters.http.lua", "envoy.filters.http.router"]
    (log,) = manager.access_log
    assert (log.filter.header_filter.header.name, log.filter.header_filter.header.string_match.exact) == (
        ":method",
        "POST",
    )
    config = als_config_pb2.HttpGrpcAccessLogConfig()
    log.typed_config.Unpack(config)
    assert config.common_config.log_name == names.ANSWER_LOG
    assert config.common_config.grpc_service.envoy_grpc.cluster_name == names.XDS_CLUSTER
    assert list(config.additional_request_headers_to_log) == [
        names.SEGMENT_HEADER,
        names.AFFINITY_HEADER,
        names.ROUTED_HEADER,
    ]
    assert list(config.additional_response_headers_to_log) == [
        names.VARIANT_HEADER,
        names.SERVER_VARIANT_HEADER,
    ]


def test_a_first_token_before_the_request_started_is_no_ttft():
    answer = answer_from(entry(STREAM, first_ms=-5.0))  # the system clock stepped back mid-request
    assert answer is not None
    assert answer.ttft is None


def test_a_mirrored_copys_answer_is_its_variants_and_marked_as_a_shadow():
    store = AnswerStore()
    receiver = AnswerReceiver(store)
    copies = message(names.SHADOW_LOG, entry(STREAM, cluster=names.shadow_cluster("b-shadow")))
    asyncio.run(receiver.StreamAccessLogs(messages(copies), None))
    asyncio.run(receiver.StreamAccessLogs(messages(message(names.ANSWER_LOG, entry(STREAM))), None))
    shadow, routed = store.since(0).answers
    assert (shadow.variant, shadow.shadow) == ("b-shadow", True)  # a variant's own name may end so
    assert (routed.variant, routed.shadow) == ("zero-layer", False)
