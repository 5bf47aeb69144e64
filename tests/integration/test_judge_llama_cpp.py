"""The judge's protocol against a server nobody here wrote: llama.cpp (xllamacpp) on the tiny model made
locally, as an OpenAI-compatible judge. The tiny model's reply is rarely one of the three words, so the
outcome is a verdict or "not A, B or TIE": never a failed exchange (the verdict logic is tested against a
deterministic judge in tests/unit/test_judge.py). The tiny model's context is 256 tokens, so the spec's own
short template (the default one is 262 tokens there: llama.cpp refuses it with a 400, which the judge
reports as no verdict)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.quality.judge import Budget, Judge

pytestmark = pytest.mark.integration


def test_the_judge_speaks_to_llama_cpp(llama_cpp):
    async def ask() -> list:
        template = "Q: {request}\nA: {first}\nB: {second}\nBetter (A, B or TIE):"
        judge = Judge(f"{llama_cpp.url}/v1", "judge", Budget(10), template=template, timeout=60.0)
        return [await judge.compare("4", "5", "What is 2+2?") for _ in range(3)]

    for judged in asyncio.run(ask()):
        assert judged.preference is not None or "not A, B or TIE" in judged.why, judged
