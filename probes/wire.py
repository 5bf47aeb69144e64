"""The two streaming APIs the probe speaks, as their official wire formats define them.

Only what a probe needs: the request for a short streamed reply, and what each SSE event says about
it. A stream counts as *complete* once the server has said why it stopped (Anthropic's
`message_stop`; an OpenAI chunk with a `finish_reason`): `data: [DONE]` after it is optional, since
`transformers serve` closes the connection after its last chunk instead. *Content* is an event
carrying generated text, never a keep-alive (graystack's `ping` events and `: ping` comments), a
role-only first chunk (vLLM, graystack) or an empty delta: the probe's TTFT ends there. An OpenAI
chunk's `system_fingerprint` is read too: vLLM started with `--fingerprint-mode custom
--fingerprint-value VALUE` echoes VALUE there (the probe compares it with the checkpoint's fingerprint,
probes/loaded.py), `transformers serve` sends "", llama.cpp `b<build>-<commit>`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ANTHROPIC_VERSION = "2023-06-01"
PROMPT = "ping"
MAX_TOKENS = 8
# Delta fields that carry generated output: text, reasoning (vLLM, llama.cpp), tool-call arguments.
ANTHROPIC_CONTENT = ("text", "thinking", "partial_json")
OPENAI_CONTENT = ("content", "reasoning_content", "reasoning", "tool_calls")


class Api(StrEnum):
    ANTHROPIC = "anthropic"
    OPENAI = "openai"


@dataclass(frozen=True)
class Reading:
    """What one event says: it carries generated output, the server said why it stopped, or an error;
    `system_fingerprint`: the OpenAI chunk's, None where the chunk has none."""

    content: bool = False
    complete: bool = False
    error: str | None = None
    system_fingerprint: str | None = None


@dataclass(frozen=True)
class Exchange:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


def request(api: Api, model: str) -> Exchange:
    """A short streamed reply to one user turn, in `api`'s format."""
    turns = [{"role": "user", "content": PROMPT}]
    body = {"model": model, "max_tokens": MAX_TOKENS, "stream": True, "messages": turns}
    if api is Api.ANTHROPIC:
        return Exchange("/v1/messages", body, {"anthropic-version": ANTHROPIC_VERSION})
    return Exchange("/v1/chat/completions", body, {})


def model_list_headers(api: Api) -> dict[str, str]:
    """GET /v1/models in `api`'s dialect (graystack's server answers in the format it is asked in)."""
    return {"anthropic-version": ANTHROPIC_VERSION} if api is Api.ANTHROPIC else {}


def read(api: Api, data: str) -> Reading:
    """One SSE event's data; ValueError (or a KeyError, TypeError) when it is not what the API promises."""
    if api is Api.OPENAI and data.strip() == "[DONE]":
        return Reading()
    event = json.loads(data)
    if not isinstance(event, dict):
        raise ValueError(f"an event that is not a JSON object: {data[:80]!r}")
    return _read_anthropic(event) if api is Api.ANTHROPIC else _read_openai(event)


def _read_anthropic(event: dict[str, Any]) -> Reading:
    kind = event.get("type")
    if kind == "error":
        return Reading(error=str(event.get("error")))
    if kind == "content_block_delta":
        delta = event["delta"]
        return Reading(content=any(delta.get(name) for name in ANTHROPIC_CONTENT))
    return Reading(complete=kind == "message_stop")


def _read_openai(event: dict[str, Any]) -> Reading:
    if "error" in event:  # graystack's {"error": {...}}, transformers serve's {"error": "..."}
        return Reading(error=str(event["error"]))
    choices = event.get("choices") or []  # a usage chunk has none
    content = any(any((choice.get("delta") or {}).get(name) for name in OPENAI_CONTENT) for choice in choices)
    complete = any(choice.get("finish_reason") for choice in choices)
    echoed = event.get("system_fingerprint")
    return Reading(content, complete, system_fingerprint=None if echoed is None else str(echoed))


def completion_marker(api: Api) -> str:
    """How `api` says a stream is complete, for a probe's failure message."""
    return "message_stop" if api is Api.ANTHROPIC else "a chunk with a finish_reason"


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Each event's data (its `data:` lines joined, as the SSE spec says); comments and other fields
    are skipped, and an event the server did not end with a blank line before closing still counts."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)
