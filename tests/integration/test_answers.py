"""The gateway measures every answer itself (issue 26): the real Envoy's answer filter and access log, the
gateway's receiver, and a scripted upstream (tests/support/scripted_upstream.py) that streams both wire
formats, fails after `200` the ways servers do, and sends bad input.

Each request's body has its own length, so the test finds its answer by `prompt_bytes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import httpx
import pytest

from gateway.answers.answer import Answer
from tests.support.measured import Measured, client_ttft, measured_gateway
from tests.support.scripted_upstream import FIRST_TOKEN_S, TOKEN_GAP_S, served_scripted_upstream

pytestmark = pytest.mark.integration

# The gateway's TTFT against the client's own, on loopback: the client starts its clock before the request
# reaches Envoy and stops it after the event has crossed back, so it reads later, by a few ms on a quiet
# box; the bound leaves room for a loaded 2-core one.
TTFT_BOUND_S = 0.025
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


@pytest.fixture
async def measured(tmp_path, envoy_binary):
    with served_scripted_upstream() as port:
        async with measured_gateway(
            tmp_path, envoy_binary, {"baseline": port, "candidate": port}, {}
        ) as running:
            yield running


def body(pad: int, stream: bool = True) -> dict:
    return {
        "model": "m",
        "max_tokens": 8,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
        "pad": "x" * pad,
    }


async def ask(
    measured: Measured, scripts: list[str], stop_after_first: bool = False
) -> dict[str, tuple[int, float | None, Answer]]:
    """Each script once, one after another: script -> (status, client TTFT, the gateway's answer)."""
    cursor = measured.gateway.answers.cursor
    seen: dict[str, tuple[int, float | None, int]] = {}
    async with httpx.AsyncClient(base_url=measured.url, timeout=10) as client:
        for pad, script in enumerate(scripts):
            sent = body(pad)
            api = script.removeprefix("json-").partition("-")[0]
            path = PATHS.get(api, PATHS["chat"])
            status, ttft = await client_ttft(client, path, {"x-script": script}, sent, stop_after_first)
            seen[script] = (status, ttft, len(httpx.Request("POST", "/", json=sent).content))
    answers = {a.prompt_bytes: a for a in await measured.answers(cursor, len(scripts))}
    return {script: (status, ttft, answers[size]) for script, (status, ttft, size) in seen.items()}


async def test_ttft_is_the_first_content_event_and_agrees_with_the_client(measured):
    results = await ask(measured, ["chat", "messages", "json-chat", "json-messages"])
    for script, (status, client, answer) in results.items():
        assert status == 200
        assert answer.ttft is not None, (script, answer)
        assert client is not None, script
        # not the first byte (headers, role chunk, message_start and ping came FIRST_TOKEN_S earlier)
        if answer.streamed:
            assert answer.ttft >= FIRST_TOKEN_S, (script, answer)
        assert -0.001 <= client - answer.ttft <= TTFT_BOUND_S, (script, client, answer)
    chat, messages = results["chat"][2], results["messages"][2]
    assert (chat.api, chat.streamed, chat.segment, chat.variant) == ("chat", True, "default", "baseline")
    assert (chat.input_tokens, chat.output_tokens, chat.tokens_counted) == (5, 3, False)
    assert (chat.finish, chat.ending, chat.failed) == ("stop", "complete", False)
    assert chat.itl is not None
    assert TOKEN_GAP_S * 0.9 <= chat.itl <= TOKEN_GAP_S + 0.03
    assert (messages.api, messages.input_tokens, messages.output_tokens) == ("messages", 7, 3)
    assert (messages.finish, messages.ending) == ("length", "complete")
    unstreamed = results["json-messages"][2]
    assert (unstreamed.streamed, unstreamed.output_tokens, unstreamed.finish) == (False, 2, "stop")
    assert results["json-chat"][2].input_tokens == 5


async def test_failures_after_200_are_seen_and_classified(measured):
    results = await ask(
        measured,
        ["chat-error-chunk", "messages-error", "chat-cut", "messages-cut", "chat-reset", "chat-no-usage"],
    )
    endings = {
        script: (answer.ending, answer.finish, answer.failed) for script, (_, _, answer) in results.items()
    }
    assert endings == {
        "chat-error-chunk": ("error", "error", True),
        "messages-error": ("error", "error", True),
        "chat-cut": ("cut", None, True),
        "messages-cut": ("cut", None, True),
        "chat-reset": ("cut", None, True),
        "chat-no-usage": ("complete", "length", False),
    }
    assert all(status == 200 for status, _, _ in results.values())
    assert results["messages-error"][2].error_type == "overloaded_error"
    assert results["chat-error-chunk"][2].error_type == "server_error"
    assert results["chat-cut"][2].ttft is not None  # measured as far as it went
    no_usage = results["chat-no-usage"][2]
    assert (no_usage.output_tokens, no_usage.tokens_counted) == (4, True)


async def test_responses_streams_are_measured_by_their_typed_events(measured):
    results = await ask(measured, ["responses", "responses-incomplete", "responses-failed", "responses-cut"])
    endings = {script: (a.api, a.ending, a.finish, a.failed) for script, (_, _, a) in results.items()}
    assert endings == {
        "responses": ("responses", "complete", "stop", False),
        "responses-incomplete": ("responses", "complete", "length", False),
        "responses-failed": ("responses", "error", "error", True),
        "responses-cut": ("responses", "cut", None, True),
    }
    status, client, answer = results["responses"]
    assert status == 200
    assert answer.ttft is not None
    assert answer.ttft >= FIRST_TOKEN_S  # the first text delta, not the `response.created` before it
    assert client is not None
    assert -0.001 <= client - answer.ttft <= TTFT_BOUND_S
    assert (answer.input_tokens, answer.output_tokens, answer.unreadable) == (6, 3, 0)
    assert results["responses-failed"][2].error_type == "server_error"


async def test_a_client_that_goes_away_is_told_from_a_cut_stream(measured):
    results = await ask(measured, ["chat-long"], stop_after_first=True)
    _, client, answer = results["chat-long"]
    assert answer.ending == "client_gone"
    assert not answer.failed
    assert answer.ttft is not None
    assert client is not None
    assert client - answer.ttft <= TTFT_BOUND_S


async def test_bad_input_is_measured_as_far_as_it_goes_and_nothing_stops(measured):
    results = await ask(measured, ["malformed", "not-json", "chat"])
    malformed, not_json, after = (results[s][2] for s in ("malformed", "not-json", "chat"))
    assert (malformed.ending, malformed.finish, malformed.output_tokens) == ("complete", "stop", 2)
    assert malformed.ttft is not None
    assert malformed.unreadable == 3  # a stray line, bad JSON, an unknown event
    assert (not_json.ending, not_json.output_tokens, not_json.finish, not_json.input_tokens) == (
        "complete",
        None,
        None,
        None,
    )
    assert after.ending == "complete"  # Envoy and the receiver kept going
    assert measured.gateway.answers.counts.unreadable == 0


async def durations(measured: Measured, n: int) -> list[float]:
    """Seconds per whole streamed answer, `n` answers one after another; each must succeed."""
    taken = []
    async with httpx.AsyncClient(base_url=measured.url, timeout=10) as client:
        for pad in range(n):
            started = time.perf_counter()
            status, ttft = await client_ttft(client, PATHS["chat"], {"x-script": "chat"}, body(pad))
            taken.append(time.perf_counter() - started)
            assert status == 200
            assert ttft is not None
    return sorted(taken)


@pytest.mark.parametrize("receiver", ["stopped", "blackholed"])
async def test_a_receiver_that_is_gone_or_silent_costs_no_request_and_no_time(measured, receiver):
    before = await durations(measured, 10)
    await measured.gateway.stop()
    with contextlib.ExitStack() as stack:
        if receiver == "blackholed":  # connections are accepted by the kernel and never read
            silent = stack.enter_context(socket.socket())
            silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            silent.bind(("127.0.0.1", measured.gateway.options.xds_port))
            silent.listen(1024)
        after = await durations(measured, 20)
        await asyncio.sleep(1.5)  # flushes towards the missing receiver
        after += await durations(measured, 5)
    assert measured.envoy.alive()
    # a logger on the request's path would add a connect timeout (seconds) to each answer
    assert sorted(after)[len(after) // 2] - before[len(before) // 2] < 0.05
