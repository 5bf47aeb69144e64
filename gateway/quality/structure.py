"""What is wrong with one answer's form, on any request and at any temperature: what a client's code would
trip on, judged without a reference answer. So it runs on live canary traffic as well as on shadow pairs,
and the candidate's share of such answers is tested against the baseline's in the same segments.

    empty                   no text and no tool call (a 200 that says nothing)
    cut_by_length           the server stopped at the request's token limit (`finish: length`)
    invalid_json            the request asked for JSON (`response_format` json_object or json_schema)
                            and the text does not parse
    schema_mismatch         ... it parses, but not into what the request's schema describes
    invalid_tool_arguments  a tool call whose arguments do not parse, or do not match the tool's
                            parameters, or name a tool the request did not offer

A schema the request sent that is itself invalid judges nothing (it is the client's, not the answer's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import exceptions, validators

Problem = Literal["empty", "cut_by_length", "invalid_json", "schema_mismatch", "invalid_tool_arguments"]
PROBLEMS: tuple[Problem, ...] = (
    "empty",
    "cut_by_length",
    "invalid_json",
    "schema_mismatch",
    "invalid_tool_arguments",
)


@dataclass(frozen=True)
class Asked:
    """What the request asked of the answer's form: JSON (with a schema, or None), and the tools it
    offered, by name, with their parameters' schemas."""

    json: bool = False
    schema: Mapping[str, Any] | None = None
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # as the answer carried them: a JSON text


def problems(
    text: str | None, asked: Asked, finish: str | None, tool_calls: Sequence[ToolCall] = ()
) -> frozenset[Problem]:
    """Every problem of one answer's form (empty set: none found)."""
    found: set[Problem] = set()
    if not (text or "").strip() and not tool_calls:
        found.add("empty")
    if finish == "length":
        found.add("cut_by_length")
    if asked.json and text is not None and not tool_calls:
        found |= _json_problems(text, asked.schema)
    if any(_tool_call_invalid(call, asked.tools) for call in tool_calls):
        found.add("invalid_tool_arguments")
    return frozenset(found)


def _json_problems(text: str, schema: Mapping[str, Any] | None) -> set[Problem]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"invalid_json"}
    return {"schema_mismatch"} if schema is not None and not _matches(value, schema) else set()


def _tool_call_invalid(call: ToolCall, tools: Mapping[str, Mapping[str, Any]]) -> bool:
    if call.name not in tools:
        return True
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return True
    return not isinstance(arguments, dict) or not _matches(arguments, tools[call.name])


def _matches(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether `value` matches `schema`; True where the schema itself is not valid (nothing to judge)."""
    validator_class = validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except exceptions.SchemaError:
        return True
    return validator_class(schema).is_valid(value)
