"""The structural checks on one answer (gateway/quality/structure.py): what a client's code would trip on."""

from __future__ import annotations

import pytest

from gateway.quality.structure import Asked, ToolCall, problems

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(
    ("text", "asked", "finish", "expected"),
    [
        ("Paris is the capital.", Asked(), "stop", set()),
        ("", Asked(), "stop", {"empty"}),
        ("   \n", Asked(), "stop", {"empty"}),
        ("Paris is the", Asked(), "length", {"cut_by_length"}),
        ('{"name": "Ada"}', Asked(json=True), "stop", set()),
        ('{"name": "Ada"', Asked(json=True), "length", {"invalid_json", "cut_by_length"}),
        ("Sure! Here is the JSON: {}", Asked(json=True), "stop", {"invalid_json"}),
        ('{"name": "Ada", "age": 36}', Asked(json=True, schema=PERSON), "stop", set()),
        ('{"age": "old"}', Asked(json=True, schema=PERSON), "stop", {"schema_mismatch"}),
        ('{"age": 3}', Asked(json=True, schema={"type": "nonsense"}), "stop", set()),  # the client's schema
        ("not json", Asked(), "stop", set()),  # JSON was not asked for
    ],
)
def test_the_form_of_a_text_answer(text, asked, finish, expected):
    assert problems(text, asked, finish) == expected


def test_tool_calls_are_judged_against_the_tools_the_request_offered():
    asked = Asked(tools={"weather": WEATHER})
    assert problems(None, asked, "tool_call", [ToolCall("weather", '{"city": "Oslo"}')]) == set()
    assert problems("", asked, "tool_call", [ToolCall("weather", '{"city": ')]) == {"invalid_tool_arguments"}
    assert problems("", asked, "tool_call", [ToolCall("weather", '{"town": "Oslo"}')]) == {
        "invalid_tool_arguments"
    }
    assert problems("", asked, "tool_call", [ToolCall("weather", "[1]")]) == {"invalid_tool_arguments"}
    assert problems("", asked, "tool_call", [ToolCall("search", "{}")]) == {"invalid_tool_arguments"}
    # a tool call is an answer: not empty, and a JSON-mode request answered by a tool call is not judged as JSON
    json_asked = Asked(json=True, tools={"weather": WEATHER})
    assert problems("", json_asked, "tool_call", [ToolCall("weather", '{"city": "Oslo"}')]) == set()
