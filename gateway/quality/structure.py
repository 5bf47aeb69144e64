"""What is wrong with one answer's form, on any request and at any temperature: what a client's code would
trip on, judged without a reference answer. So it runs on live canary traffic as well as on shadow pairs,
and the candidate's share of such answers is tested against the baseline's in the same segments.

    empty                   no text and no tool call (a 200 that says nothing)
    cut_by_length           the server stopped at the request's token limit (`finish: length`)
    invalid_json            the request asked for JSON (`response_format` json_object or json_schema)
                            and the text does not parse
    invalid_tool_arguments  a tool call whose arguments do not parse as a JSON object

An answer cut at the limit is counted apart, not as malformed (the length_cut check tests it against the
baseline's share, where `max_cut_ratio` asks): servers stop at the client's own
`max_tokens`, which many clients set low, so such cuts can be the rule on both sides, and an answer
counted malformed for that could hide every other problem behind it (a JSON-mode answer cut short is
invalid JSON anyway). `malformed` is any of the other problems.

Judged on what the answer filter captured (gateway/answers/capture.py): the text, the tool calls'
arguments one after another, and the request's `response_format` type. Not yet: whether the JSON matches
the schema the request gave (the filter keeps only that one was given, not the schema).
"""

from __future__ import annotations

import json
from typing import Literal

from gateway.answers.answer import Answer

Problem = Literal["empty", "cut_by_length", "invalid_json", "invalid_tool_arguments"]
JSON_FORMATS = frozenset({"json_object", "json_schema"})
_DECODER = json.JSONDecoder()


def problems(answer: Answer) -> frozenset[Problem]:
    """Every problem of one captured answer's form (empty set: none found)."""
    text, calls = answer.text or "", answer.calls or ""
    found: set[Problem] = set()
    if not text.strip() and not calls.strip():
        found.add("empty")
    if answer.finish == "length":
        found.add("cut_by_length")
    if answer.response_format in JSON_FORMATS and not calls.strip() and not _parses(text):
        found.add("invalid_json")
    if calls.strip() and not _objects(calls):
        found.add("invalid_tool_arguments")
    return frozenset(found)


def malformed(found: frozenset[Problem]) -> bool:
    """A problem of the answer's form, which the `structure` check tests (a length cut alone is not)."""
    return bool(found - {"cut_by_length"})


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _objects(calls: str) -> bool:
    """Whether `calls` is one or more JSON objects one after another (each tool call's arguments)."""
    at = 0
    while at < len(calls):
        try:
            value, at = _DECODER.raw_decode(calls, at)
        except ValueError:
            return False
        if not isinstance(value, dict):
            return False
        while at < len(calls) and calls[at].isspace():
            at += 1
    return True
