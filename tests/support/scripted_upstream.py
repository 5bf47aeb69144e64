"""A test-only upstream that answers each request with the script its `x-script` header names: well-formed
streams in both wire formats, the failures a server makes after `200` (an `event: error`, an error chunk,
a stream cut before its final event, a reset connection) and bad input (malformed SSE, unknown events,
no `usage`, a body that is not JSON). Real HTTP (uvicorn in a thread) on a free loopback port, so Envoy
and its answer filter see a real upstream; graystack's model server stays free of test-only faults.

Every streamed script sends its first content FIRST_TOKEN_S after the headers and a role-only (or
`message_start`) event, so a measurement that took the first byte for the first token is off by that much.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager

from graystack.local.standin import read_body
from tests.support.threaded_server import served

FIRST_TOKEN_S = 0.2
TOKEN_GAP_S = 0.02
SSE = "text/event-stream"


def _chat(delta: dict | None = None, finish: str | None = None, **extra) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'choices': choices, **extra})}\n\n"


def _event(name: str, **data) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"


ROLE = _chat({"role": "assistant", "content": ""})
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
START = _event("message_start", message={"id": "m1", "usage": {"input_tokens": 7, "output_tokens": 1}})


def _delta(text: str) -> str:
    return _event("content_block_delta", index=0, delta={"type": "text_delta", "text": text})


def _response(status: str, **extra) -> dict:
    return {"id": "resp_1", "object": "response", "status": status, "output": [], **extra}


RESPONSE_HEAD = [
    _event("response.created", response=_response("in_progress")),
    _event("response.output_item.added", output_index=0, item={"type": "message", "content": []}),
]
RESPONSE_USAGE = {"input_tokens": 6, "output_tokens": 3, "total_tokens": 9}


def _text_delta(text: str) -> str:
    return _event("response.output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta=text)


# name -> (content type, [head events], [content events, FIRST_TOKEN_S then TOKEN_GAP_S apart], [tail], end)
# end: "close" ends the body cleanly, "reset" drops the connection mid-body.
SCRIPTS: dict[str, tuple[str, list[str], list[str], list[str], str]] = {
    "chat": (
        SSE,
        [ROLE],
        [_chat({"content": t}) for t in "abc"],
        [_chat({}, "stop", usage=USAGE), "data: [DONE]\n\n"],
        "close",
    ),
    "chat-no-usage": (
        SSE,
        [ROLE],
        [_chat({"content": t}) for t in "abcd"],
        [_chat({}, "length"), "data: [DONE]\n\n"],
        "close",
    ),
    "chat-error-chunk": (
        SSE,
        [ROLE],
        [_chat({"content": "a"})],
        [
            'data: {"error": {"message": "engine died", "type": "server_error", "code": 500}}\n\n',
            "data: [DONE]\n\n",
        ],
        "close",
    ),
    "chat-cut": (SSE, [ROLE], [_chat({"content": t}) for t in "ab"], [], "close"),
    "chat-reset": (SSE, [ROLE], [_chat({"content": t}) for t in "ab"], [], "reset"),
    "chat-long": (
        SSE,
        [ROLE],
        [_chat({"content": "x"}) for _ in range(100)],
        [_chat({}, "stop"), "data: [DONE]\n\n"],
        "close",
    ),
    "messages": (
        SSE,
        [
            START,
            _event("ping"),
            _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        ],
        [_delta(t) for t in "abc"],
        [
            _event("content_block_stop", index=0),
            _event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 3}),
            _event("message_stop"),
        ],
        "close",
    ),
    "messages-error": (
        SSE,
        [START],
        [_delta("a")],
        [_event("error", error={"type": "overloaded_error", "message": "Overloaded"})],
        "close",
    ),
    "messages-cut": (SSE, [START], [_delta(t) for t in "ab"], [], "close"),
    "responses": (
        SSE,
        RESPONSE_HEAD,
        [_text_delta(t) for t in "abc"],
        [
            _event("response.output_text.done", text="abc"),
            _event("response.completed", response=_response("completed", usage=RESPONSE_USAGE)),
        ],
        "close",
    ),
    "responses-incomplete": (
        SSE,
        RESPONSE_HEAD,
        [_text_delta(t) for t in "ab"],
        [
            _event(
                "response.incomplete",
                response=_response("incomplete", incomplete_details={"reason": "max_output_tokens"}),
            )
        ],
        "close",
    ),
    "responses-failed": (
        SSE,
        RESPONSE_HEAD,
        [_text_delta("a")],
        [
            _event(
                "response.failed",
                response=_response("failed", error={"code": "server_error", "message": "x"}),
            )
        ],
        "close",
    ),
    "responses-cut": (SSE, RESPONSE_HEAD, [_text_delta(t) for t in "ab"], [], "close"),
    "malformed": (
        SSE,
        [ROLE, "this line is not SSE\n\n", "data: {not json\n\n", _event("surprise", detail=1)],
        [_chat({"content": t}) for t in "ab"],
        [_chat({}, "stop"), "data: [DONE]\n\n"],
        "close",
    ),
    "json-chat": (
        "application/json",
        [],
        [
            json.dumps(
                {
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hi"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": USAGE,
                }
            )
        ],
        [],
        "close",
    ),
    "json-messages": (
        "application/json",
        [],
        [
            json.dumps(
                {
                    "type": "message",
                    "content": [{"type": "text", "text": "hi"}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 7, "output_tokens": 2},
                }
            )
        ],
        [],
        "close",
    ),
    "not-json": ("text/plain", [], ["this is not JSON at all"], [], "close"),
    # answer capture (tests/integration/test_capture.py): text that needs unescaping, a tool call's arguments,
    # a long answer past any small cap, and bytes that are not UTF-8 (sent as they are: surrogateescape)
    "chat-unicode": (
        SSE,
        [ROLE],
        [_chat({"content": t}) for t in ("h\u00e9", 'llo "', "\u2713\n")]
        + [_chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]})],
        [_chat({}, "stop"), "data: [DONE]\n\n"],
        "close",
    ),
    "json-long": (
        "application/json",
        [],
        [json.dumps({"object": "chat.completion", "choices": [{"message": {"content": "y" * 5000}}]})],
        [],
        "close",
    ),
    "chat-not-utf8": (SSE, [ROLE], [_chat({"content": "ok"}).replace("ok", "o\udcffk")], [], "close"),
}


class ScriptedUpstream:
    """`broken_every`: every so many answers, `broken_script` replaces the one asked for (a server that
    breaks a share of its streams after `200`, whatever the client asked). `slower_by`: seconds added
    before every stream's first content (a server slower to its first token)."""

    def __init__(
        self, broken_every: int | None = None, broken_script: str = "chat-error-chunk", slower_by: float = 0.0
    ) -> None:
        self.broken_every = broken_every
        self.broken_script = broken_script
        self.slower_by = slower_by
        self.answered = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive)
        if scope["path"] in ("/readyz", "/healthz"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        headers = dict(scope["headers"])
        name = headers.get(b"x-script", b"chat").decode()
        self.answered += 1
        if self.broken_every and self.answered % self.broken_every == 0:
            name = self.broken_script
        content_type, head, body, tail, end = SCRIPTS[name]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", content_type.encode())],
            }
        )
        for event in head:
            await send(
                {
                    "type": "http.response.body",
                    "body": event.encode("utf-8", "surrogateescape"),
                    "more_body": True,
                }
            )
        if content_type == SSE:
            await asyncio.sleep(FIRST_TOKEN_S + self.slower_by)
        for i, event in enumerate(body):
            if i:
                await asyncio.sleep(TOKEN_GAP_S)
            await send(
                {
                    "type": "http.response.body",
                    "body": event.encode("utf-8", "surrogateescape"),
                    "more_body": True,
                }
            )
        if end == "reset":
            raise ConnectionAbortedError("scripted reset mid-stream")
        for event in tail:
            await send(
                {
                    "type": "http.response.body",
                    "body": event.encode("utf-8", "surrogateescape"),
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b""})


@contextmanager
def served_scripted_upstream(upstream: ScriptedUpstream | None = None) -> Iterator[int]:
    """The upstream's port while the block runs; stopped and joined after it."""
    with served(upstream or ScriptedUpstream(), "the scripted upstream", log_level="critical") as port:
        yield port
