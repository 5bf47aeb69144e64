"""The judge (gateway/quality/judge.py) against a deterministic judge served over real HTTP: it prefers the
answer that says "good", whichever position it is shown in, so every verdict is known; and a judge that
is slow, over budget, failing or talking nonsense gives no verdict and says why."""

from __future__ import annotations

import asyncio
import random
import re

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.quality.judge import TEMPLATE, Budget, Judge, parse_choice, preference_of, prompt
from gateway.spec.quality import check_template
from tests.support.threaded_server import served


def judge_app(behaviour: dict) -> Starlette:
    """Replies per `behaviour["mode"]`: `fair` (the answer containing "good" wins, TIE if both or neither),
    `slow`, `nonsense`, `error`; records each prompt in `behaviour["prompts"]`."""

    async def completions(request: Request) -> Response:
        text = (await request.json())["messages"][0]["content"]
        behaviour.setdefault("prompts", []).append(text)
        mode = behaviour["mode"]
        if mode == "error":
            return JSONResponse({"error": "overloaded"}, status_code=503)
        if mode == "slow":
            await asyncio.sleep(2)
        first = re.search(r"Answer A:\n(.*?)\n\nAnswer B:", text, re.S)
        second = re.search(r"Answer B:\n(.*?)\n\nReply", text, re.S)
        assert first is not None
        assert second is not None
        a, b = ("good" in first.group(1)), ("good" in second.group(1))
        word = "TIE" if a == b else ("A" if a else "B")
        content = "I think the answer is unclear" if mode == "nonsense" else f"{word}."
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": content}}]})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def judging(port: int, per_hour: int = 1000, timeout: float = 5.0, seed: int = 1) -> Judge:
    return Judge(
        f"http://127.0.0.1:{port}/v1", "judge", Budget(per_hour), timeout=timeout, rng=random.Random(seed)
    )


async def verdicts(judge: Judge, pairs: list[tuple[str, str]]) -> list:
    return [await judge.compare(baseline, candidate, "What is 2+2?") for baseline, candidate in pairs]


def test_verdicts_are_the_candidates_whichever_order_the_answers_were_shown_in():
    behaviour = {"mode": "fair"}
    pairs = [("good: 4", "5")] * 10 + [("5", "good: 4")] * 10 + [("good", "good")] * 4
    with served(judge_app(behaviour), "the judge") as port:
        judged = asyncio.run(verdicts(judging(port), pairs))
    assert [j.preference for j in judged] == ["worse"] * 10 + ["better"] * 10 + ["tie"] * 4
    shown_first = [p.index("good") < p.index("Answer B:") for p in behaviour["prompts"][:10]]
    assert 0 < sum(shown_first) < 10  # the baseline's answer was shown first in some pairs, second in others


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("slow", "did not answer within 0.5 s"),
        ("nonsense", "not A, B or TIE: 'I think the answer is unclear'"),
        ("error", "HTTP 503"),
    ],
)
def test_a_judge_that_fails_gives_no_verdict_and_says_why(mode, why):
    with served(judge_app({"mode": mode}), "the judge") as port:
        (judged,) = asyncio.run(verdicts(judging(port, timeout=0.5), [("good", "bad")]))
    assert judged.preference is None
    assert why in judged.why


def test_an_unreachable_judge_gives_no_verdict():
    judge = Judge("http://127.0.0.1:9/v1", "judge", Budget(10), timeout=1.0)
    (judged,) = asyncio.run(verdicts(judge, [("good", "bad")]))
    assert judged.preference is None
    assert "unreachable" in judged.why


def test_the_budget_caps_calls_in_any_hour():
    now = [0.0]
    budget = Budget(3, clock=lambda: now[0])
    assert [budget.take() for _ in range(4)] == [True, True, True, False]
    now[0] = 3599.0
    assert not budget.take()
    now[0] = 3600.5  # the first three calls are an hour old
    assert [budget.take() for _ in range(4)] == [True, True, True, False]
    with pytest.raises(ValueError, match="budget_per_hour must be at least 1"):
        Budget(0)


def test_over_budget_the_judge_is_not_called():
    behaviour = {"mode": "fair"}
    with served(judge_app(behaviour), "the judge") as port:
        judged = asyncio.run(verdicts(judging(port, per_hour=2), [("good", "bad")] * 3))
    assert [j.preference for j in judged] == ["worse", "worse", None]
    assert "budget of 2 calls an hour is spent" in judged[2].why
    assert len(behaviour["prompts"]) == 2


def test_the_prompt_keeps_answers_as_they_are_and_the_reply_is_read_strictly():
    template = "Request:\n{request}\nAnswer A:\n{first}\nAnswer B:\n{second}\n"
    filled = prompt(template, "say {second}", "a {first} b", "{request}")
    assert filled == "Request:\nsay {second}\nAnswer A:\na {first} b\nAnswer B:\n{request}\n"
    assert [parse_choice(r) for r in ("A", " b.", "Tie", "**B**", "Answer: A", "AB", "")] == [
        "A",
        "B",
        "TIE",
        "B",
        None,
        None,
        None,
    ]
    assert (preference_of("A", candidate_first=True), preference_of("A", candidate_first=False)) == (
        "better",
        "worse",
    )
    with pytest.raises(ValueError, match=r"\{second\} exactly once"):
        check_template("{request} {first}")
    with pytest.raises(ValueError, match=r"\{request\} at most once"):
        check_template("{request} {request} {first} {second}")
    assert "{request}" not in TEMPLATE  # the request is not captured: the built-in template shows answers
