"""What the answer filter captured (gateway/envoy/capture_lua.py), as text: pure, for entries.py.

A stream's fragments arrive as the server escaped them inside its JSON strings, so they are unescaped here
(a fragment cut at the cap may end inside an escape: the broken tail is dropped). A whole body arrives
raw, its first `max_answer_bytes`: parsed as JSON where it is whole, and its text taken the way each API
puts it (chat `message.content` and `tool_calls`, completions `text`, Messages `text` and `tool_use`
blocks, Responses `output_text` and `function_call` items); a body cut at the cap is read up to the cut.
Where only equality is needed (`analysis.quality.keep: digest`), the receiver keeps digests (`digested`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from gateway.answers.answer import Answer

_PARTIAL_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{0,3})?$")
_FIRST_TEXT = re.compile(r'"(?:content|text|output_text)"\s*:\s*"')


@dataclass(frozen=True)
class Captured:
    """`text` and `calls` (tool-call arguments): None where unreadable (not UTF-8, or not a JSON string)."""

    text: str | None
    calls: str | None
    truncated: bool
    unreadable: bool


def unescape(fragment: str, truncated: bool = False) -> str | None:
    """A JSON string's inside, unescaped; None where it is not one."""
    if truncated:
        fragment = _cut_tail(fragment)
    try:
        value = json.loads(f'"{fragment}"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _cut_tail(fragment: str) -> str:
    """Drop an escape the cap cut in two (a lone trailing backslash, or `\\u` without its four digits)."""
    backslashes = len(fragment) - len(fragment.rstrip("\\"))
    if backslashes % 2:
        return fragment[:-1]
    match = _PARTIAL_ESCAPE.search(fragment)
    if match and match.group(1) is not None:
        before = fragment[: match.start()]
        if (len(before) - len(before.rstrip("\\"))) % 2 == 0:
            return before
    return fragment


def _parts(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def body_text(body: dict[str, Any]) -> tuple[str, str]:
    """(text, tool-call arguments) of a whole JSON answer, for each API's shape."""
    text, calls = [], []
    for choice in body.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        message = choice.get("message") or {}
        text.append(_parts(message.get("content")) if isinstance(message, dict) else "")
        if isinstance(choice.get("text"), str):
            text.append(choice["text"])
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
            calls.append(arguments if isinstance(arguments, str) else json.dumps(arguments))
    blocks = body.get("content") if body.get("type") == "message" else None
    for block in blocks or []:
        if isinstance(block, dict) and block.get("type") == "text":
            text.append(_parts([block]))
        elif isinstance(block, dict) and block.get("type") == "tool_use":
            calls.append(json.dumps(block.get("input")))
    for item in body.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            text.append(_parts(item.get("content")))
        elif isinstance(item, dict) and item.get("type") == "function_call":
            calls.append(str(item.get("arguments", "")))
    return "".join(text), "".join(calls)


def _cut_body_text(raw: str) -> str | None:
    """A body cut at the cap: the first content string, up to the cut."""
    match = _FIRST_TEXT.search(raw)
    if match is None:
        return None
    rest = raw[match.end() :]
    end = re.search(r'(?<!\\)(?:\\\\)*"', rest)
    return unescape(rest[: end.end() - 1] if end else rest, truncated=end is None)


def captured(fields: dict[str, Any]) -> Captured:
    """The filter's `capture` table (its `end.capture`) as text."""
    truncated = fields.get("truncated") is True
    if fields.get("unreadable") is True:
        return Captured(None, None, truncated, True)
    text, calls = fields.get("text", ""), fields.get("calls", "")
    if not isinstance(text, str) or not isinstance(calls, str):
        return Captured(None, None, truncated, True)
    if fields.get("raw") is True:
        try:
            body = json.loads(text)
        except ValueError:
            cut = _cut_body_text(text) if truncated else None
            return Captured(cut, None, truncated, cut is None and not truncated)
        if isinstance(body, dict):
            whole, arguments = body_text(body)
            return Captured(whole, arguments, truncated, False)
        return Captured(None, None, truncated, True)
    text_, calls_ = unescape(text, truncated), unescape(calls, truncated)
    return Captured(text_, calls_, truncated, text_ is None or calls_ is None)


def digested(answer: Answer) -> Answer:
    """The answer with its text and tool calls replaced by their SHA-256 digests: what comparing greedy
    answers for equality needs, and no more (`analysis.quality.keep: digest`)."""
    return replace(answer, text=_digest(answer.text), calls=_digest(answer.calls))


def _digest(content: str | None) -> str | None:
    return None if content is None else hashlib.sha256(content.encode()).hexdigest()
