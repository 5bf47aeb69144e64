"""The structural checks on one captured answer (gateway/quality/structure.py): what a client's code would
trip on, judged without a reference answer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.answers.entries import answer_from
from gateway.quality.structure import problems
from tests.unit.test_answers import STREAM, entry

ANSWER = answer_from(entry(STREAM))


@pytest.mark.parametrize(
    ("text", "calls", "response_format", "finish", "expected"),
    [
        ("Paris is the capital.", None, None, "stop", set()),
        ("", None, None, "stop", {"empty"}),
        ("   \n", "", None, "stop", {"empty"}),
        ("Paris is the", None, None, "length", {"cut_by_length"}),
        ('{"name": "Ada"}', None, "json_object", "stop", set()),
        ('{"name": "Ada"}', None, "json_schema", "stop", set()),
        ('{"name": "Ada"', None, "json_object", "length", {"invalid_json", "cut_by_length"}),
        ("Sure! Here is the JSON: {}", None, "json_schema", "stop", {"invalid_json"}),
        ("not json", None, "text", "stop", set()),  # JSON was not asked for
        (None, '{"city": "Oslo"}', None, "tool_call", set()),
        (None, '{"city": "Oslo"}{"city": "Rome"} ', None, "tool_call", set()),  # two calls' arguments
        (None, '{"city": ', None, "tool_call", {"invalid_tool_arguments"}),
        (None, '{"city": "Oslo"}[1]', None, "tool_call", {"invalid_tool_arguments"}),
        ("", '{"city": "Oslo"}', "json_object", "tool_call", set()),  # a tool call answers a JSON request
    ],
)
def test_the_form_of_an_answer(text, calls, response_format, finish, expected):
    assert ANSWER is not None
    answer = replace(ANSWER, text=text, calls=calls, response_format=response_format, finish=finish)
    assert problems(answer) == expected
