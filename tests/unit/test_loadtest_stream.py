"""Reading and timing a Messages stream: the events are made by the model server's own SSE writer, so
the parser reads the wire format the users meet through the gateway."""

import pytest

from inference.server.messages import _sse
from loadtests.stream import StreamError, StreamTiming, sse_events


def lines(*events: tuple[str, dict]) -> list[str]:
    return "".join(_sse(kind, data) for kind, data in events).split("\n")


DELTA = ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "a"}})
STREAM = [
    ("message_start", {"message": {}}),
    ("content_block_start", {"index": 0}),
    DELTA,
    DELTA,
    DELTA,
    ("content_block_stop", {"index": 0}),
    ("message_stop", {}),
]


def test_the_server_s_events_are_read_in_order_with_their_data():
    events = list(sse_events(lines(*STREAM)))
    assert [e.kind for e in events] == [kind for kind, _ in STREAM]
    assert events[2].data["delta"]["text"] == "a"


def test_ttft_is_the_first_delta_inter_token_the_mean_gap_and_e2e_the_stop():
    timing = StreamTiming(started=10.0)
    clock = iter([10.1, 10.5, 10.7, 10.9, 11.1, 11.2])  # start, block start, 3 deltas, block stop
    for event in sse_events(lines(*STREAM[:-1])):
        timing.record(event, next(clock))
    timing.record(next(sse_events(lines(STREAM[-1]))), 11.5)
    timing.check_complete()
    assert timing.ttft == pytest.approx(0.7)
    assert timing.inter_token == pytest.approx(0.2)
    assert timing.e2e == pytest.approx(1.5)


def test_an_error_event_fails_the_request_with_the_server_s_message():
    timing = StreamTiming(started=0.0)
    error = ("error", {"error": {"type": "overloaded_error", "message": "busy"}})
    delta, failure = sse_events(lines(DELTA, error))
    timing.record(delta, 1.0)
    with pytest.raises(StreamError, match="overloaded_error: busy"):
        timing.record(failure, 1.1)


def test_a_stream_cut_before_message_stop_is_a_failure():
    timing = StreamTiming(started=0.0)
    for event in sse_events(lines(*STREAM[:4])):
        timing.record(event, 1.0)
    with pytest.raises(StreamError, match="without message_stop after 2 deltas"):
        timing.check_complete()
    assert timing.e2e is None


def test_a_single_delta_has_no_inter_token_gap():
    timing = StreamTiming(started=0.0)
    for event in sse_events(lines(DELTA)):
        timing.record(event, 0.3)
    assert timing.inter_token is None
    assert timing.ttft == pytest.approx(0.3)


def test_data_that_is_not_json_is_reported():
    with pytest.raises(StreamError, match="not JSON"):
        list(sse_events(["event: message_start", "data: {oops", ""]))
