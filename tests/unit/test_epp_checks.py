"""The checks graystack's Envoy asks the picker its gateway serves (gateway/epp/checks.py, ext_authz over
HTTP/1.1) and the log of the picks' ends (gateway/answers/receiver.py): the pod of the variant the path
names, always a 200, the count held until the request's entry, and bad checks answered or closed
without a pick, never refused."""

from __future__ import annotations

import asyncio

import h11
from envoy.data.accesslog.v3 import accesslog_pb2

from gateway import names
from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from gateway.epp.checks import Checks
from gateway.epp.picker import Picker
from gateway.epp.wanted import Wanted
from tests.unit.test_answers import message, messages

PODS = {"baseline": ("10.0.0.1:8000",), "canary": ("10.0.1.1:8000", "10.0.1.2:8000")}


class Transport:
    """What the checks wrote back, and whether they closed the connection."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


def picker() -> Picker:
    # the picker's own split would send everything to the baseline: the path's variant is taken as given
    return Picker(lambda: Wanted(pods=PODS, weights={"baseline": 100}, baseline="baseline"))


def check(variant: str, request_id: str | None = None) -> bytes:
    identified = f"x-request-id: {request_id}\r\n" if request_id else ""
    return f"POST /{variant}/v1/chat/completions HTTP/1.1\r\nhost: picker\r\n{identified}content-length: 0\r\n\r\n".encode()


def answers(written: bytes) -> list[h11.Response]:
    """The responses in what was written back, parsed as Envoy reads them."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[("host", "picker"), ("content-length", "0")]))
    client.send(h11.EndOfMessage())
    client.receive_data(written)
    found = []
    while (event := client.next_event()) is not h11.NEED_DATA:
        if isinstance(event, h11.Response):
            found.append(event)
        elif isinstance(event, h11.EndOfMessage):
            client.start_next_cycle()
            client.send(
                h11.Request(method="POST", target="/", headers=[("host", "picker"), ("content-length", "0")])
            )
            client.send(h11.EndOfMessage())
    return found


def picked(response: h11.Response) -> str | None:
    return next((v.decode() for k, v in response.headers if k.decode() == names.EPP_DESTINATION), None)


def test_each_check_picks_a_pod_of_the_variant_its_path_names_and_holds_it_until_the_entry():
    chosen, transport = picker(), Transport()
    checks = Checks(chosen, transport)  # type: ignore[arg-type]
    data = check("canary", "r-1") + check("canary", "r-2") + check("baseline", "r-3")
    checks.feed(data[:30])  # a check split across reads
    checks.feed(data[30:])
    responses = answers(transport.written)
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert {picked(r) for r in responses[:2]} == set(PODS["canary"])  # spread by their counts
    assert picked(responses[2]) == PODS["baseline"][0]
    assert sum(chosen.in_flight().values()) == 3

    receiver = AnswerReceiver(AnswerStore(), picks_ended=chosen.ended)
    ended = accesslog_pb2.HTTPAccessLogEntry()
    ended.request.request_id = "r-1"
    asyncio.run(receiver.StreamAccessLogs(messages(message(names.PICKER_LOG, ended)), None))
    assert sum(chosen.in_flight().values()) == 2
    assert receiver.store.counts.received == 0  # a pick's end is no answer


def test_a_check_the_picker_cannot_place_is_let_through_unpicked_and_a_bad_one_closes_its_connection():
    chosen, transport = picker(), Transport()
    checks = Checks(chosen, transport)  # type: ignore[arg-type]
    checks.feed(check("no-such-variant", "r-1") + check("canary"))
    unknown, unidentified = answers(transport.written)
    assert (unknown.status_code, picked(unknown)) == (200, None)
    assert (unidentified.status_code, picked(unidentified) in PODS["canary"]) == (200, True)
    assert chosen.in_flight() == {}  # no id: no end will name it, so it counted at its pick alone
    broken = Transport()
    Checks(chosen, broken).feed(b"\x00\x01 not HTTP\r\n\r\n")  # type: ignore[arg-type]
    assert (broken.closed, broken.written) == (True, b"")
