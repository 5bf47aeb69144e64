"""The `prefill` scorer: the prompt bytes each pod has still to prefill for the requests the picker sent
it, estimated by the picker (no server exports it), fewest first; counted from the pick to the answer's
first body chunk (or its headers, where no body comes to the picker), moved on `served`, dropped once."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from gateway.epp import protocol
from gateway.epp.picker import Picker, Ticket
from gateway.epp.prefix import prompt_of
from gateway.epp.scorers import Signals, prefill
from gateway.epp.service import ExtProc
from gateway.epp.wanted import Wanted
from gateway.spec.endpoint_picker import SCORERS

PODS = ("10.0.0.1:8000", "10.0.0.2:8000")


def picker_with(scorers: dict[str, float]) -> Picker:
    return Picker(lambda: Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v", scorers=scorers))


def body(who: int, size: int) -> dict[str, object]:
    """A completion request whose prompt is `size` bytes, unlike any other `who`'s from the first."""
    return {"model": "m", "prompt": f"{who:06d}" + "x" * (size - 6)}


def placed(picker: Picker, document: dict[str, object] | None) -> Ticket:
    ticket = picker.pick({}, None, document)
    assert ticket is not None
    return ticket


def test_fewest_pending_bytes_score_highest_and_equal_ones_all_alike():
    signals = Signals({}, {}, prefill={PODS[0]: 4096, PODS[1]: 1024})
    assert prefill(PODS, signals) == {PODS[0]: 0.0, PODS[1]: 1.0}
    assert prefill(PODS, Signals({}, {})) == dict.fromkeys(PODS, 1.0)


def test_a_pod_with_a_long_prefill_pending_is_passed_over_for_an_equally_loaded_one_with_a_short_one():
    picker = picker_with({**SCORERS, "prefill": 1.0})
    long = placed(picker, body(1, 4096))
    short = placed(picker, body(2, 64))
    assert short.endpoints[0] != long.endpoints[0]  # each pod now has one request in flight
    for who in range(3, 7):  # the same count in flight on both, turn after turn: the short lane wins
        following = placed(picker, body(who, 64))
        assert following.endpoints[0] == short.endpoints[0]
        picker.release(following)


def test_the_whole_prompt_counts_past_the_prefix_window_and_a_request_without_a_body_counts_nothing():
    picker = picker_with({"prefill": 1.0})
    document = body(1, 40_000)  # over the 16 KiB the prefix index hashes
    assert placed(picker, document).prefill == len(prompt_of(document, sys.maxsize)) == 40_000
    assert placed(picker, None).prefill == 0


def test_the_pending_work_leaves_at_the_first_answer_chunk_and_only_once():
    picker = picker_with({"prefill": 1.0})
    long = placed(picker, body(1, 4096))
    short = placed(picker, body(2, 64))
    assert placed(picker, body(3, 64)).endpoints[0] == short.endpoints[0]  # 4096 against 64
    picker.started(long)  # its first token: the long prompt is prefilled
    picker.started(long)  # every further chunk says the same, and takes nothing more
    assert placed(picker, body(4, 64)).endpoints[0] == long.endpoints[0]  # 0 against 128
    picker.release(long)  # its answer ends: nothing left to take
    assert placed(picker, body(5, 200)).endpoints[0] == long.endpoints[0]  # 64 against 128
    # Were the long prompt taken off more than once, its pod would stay below the other and win again.
    assert placed(picker, body(6, 64)).endpoints[0] == short.endpoints[0]  # 264 against 128


def test_the_pending_work_moves_with_the_pod_that_served_and_leaves_at_release_if_still_pending():
    picker = picker_with({"prefill": 1.0})
    long = placed(picker, body(1, 4096))
    picked = long.endpoints[0]
    other = next(pod for pod in PODS if pod != picked)
    picker.served(long, other)  # a retry onto the other pod: it prefills the long prompt now
    assert placed(picker, body(2, 64)).endpoints[0] == picked
    picker.release(long)  # ended before any chunk (an error, a closed stream): its work leaves once
    picker.release(long)
    assert placed(picker, body(3, 64)).endpoints[0] == other  # 0 against 64


def test_a_prompt_its_pod_holds_counts_less_than_one_it_does_not():
    picker = picker_with({"prefix": 2.0, "prefill": 1.0})
    first = body(1, 4096)
    turn = placed(picker, first)
    picker.release(turn)  # answered: its pod's cache holds the prompt's blocks
    again = placed(picker, {**first, "prompt": str(first["prompt"]) + "y" * 100})  # the next turn
    assert again.endpoints[0] == turn.endpoints[0]
    assert again.prefill == 4196 - 4096  # all but the whole blocks it holds
    fresh = placed(picker, body(2, 4000))  # shorter than `again`, but none of it cached
    assert fresh.endpoints[0] != turn.endpoints[0]
    assert placed(picker, body(3, 64)).endpoints[0] == turn.endpoints[0]  # 100 pending against 4000


def test_a_conversation_stays_on_the_pod_that_holds_it_while_less_waits_there_than_it_would_save():
    picker = picker_with({"prefill": 1.0})  # the prefix index is kept for it, `prefix` weighted 0
    first = body(1, 4096)
    turn = placed(picker, first)
    home = turn.endpoints[0]
    picker.release(turn)  # its pod's cache holds the prompt's blocks
    picker.served(placed(picker, body(2, 1000)), home)  # 1000 bytes wait there, none elsewhere
    prompt = str(first["prompt"])
    again = placed(picker, {**first, "prompt": prompt + "y" * 100})
    assert again.endpoints[0] == home  # 1000 + 100 there against 4196 elsewhere
    picker.served(placed(picker, body(3, 4000)), home)
    later = placed(picker, {**first, "prompt": prompt + "y" * 200})
    assert later.endpoints[0] != home  # 5100 + 136 there (65 blocks held) against 4296


class Context:
    """What the servicer asks of a gRPC context: the stream's metadata (none: a GIE gateway's)."""

    def invocation_metadata(self) -> None:
        return None


async def stream(messages: list[ext_proc.ProcessingRequest], told: list[str]) -> AsyncIterator[object]:
    for message in messages:
        told.append(str(message.WhichOneof("request")))
        yield message


def served_by(pod: str) -> ext_proc.ProcessingRequest:
    request = ext_proc.ProcessingRequest(response_headers=ext_proc.HttpHeaders())
    request.metadata_context.filter_metadata[protocol.LB_NAMESPACE].update({protocol.SERVED: pod})
    return request


@pytest.mark.parametrize(
    ("config", "started_at"),
    [
        (None, "response_body"),  # a GIE gateway streams the answer's body: its first chunk
        (  # the request's body comes, the answer's does not (its mode NONE): its headers
            ext_proc.ProtocolConfiguration(request_body_mode=ProcessingMode.FULL_DUPLEX_STREAMED),
            "response_headers",
        ),
    ],
)
async def test_the_servicer_takes_the_work_off_when_the_pod_begins_to_answer(
    monkeypatch: pytest.MonkeyPatch, config: ext_proc.ProtocolConfiguration | None, started_at: str
):
    picker = picker_with({"prefill": 1.0})
    told: list[str] = []
    started: list[str] = []
    real = picker.started
    monkeypatch.setattr(picker, "started", lambda ticket: (started.append(told[-1]), real(ticket)))
    headers = ext_proc.HttpHeaders(
        headers=base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=":path", value="/v1/completions")])
    )
    first = ext_proc.ProcessingRequest(request_headers=headers)
    if config is not None:
        first.protocol_config.CopyFrom(config)
    messages = [
        first,
        ext_proc.ProcessingRequest(
            request_body=ext_proc.HttpBody(body=b'{"prompt": "hi"}', end_of_stream=True)
        ),
        served_by(PODS[0]),
    ]
    if config is None:  # the answer's body: its first chunk, and the last
        messages += [
            ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=b"data: 1\n\n")),
            ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=b"", end_of_stream=True)),
        ]
    answers = [answer async for answer in ExtProc(picker).Process(stream(messages, told), Context())]
    assert answers
    assert started[0] == started_at
