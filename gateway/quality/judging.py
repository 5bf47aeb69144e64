"""Shadow pairs to the judge, in the background: the look that hands a pair over never waits for its
verdict, and no client request waits on any of it. At most `concurrency` pairs are with the judge at a
time; a pair that comes while they all are is not judged (sampled, like the budget samples). The
verdicts are counted per candidate variant, cumulatively, for the `judge` check; `problem` says why the
last call gave none (the check's reason while it has too few).
"""

from __future__ import annotations

import asyncio
from collections import Counter

from gateway.answers.answer import Answer
from gateway.answers.pairs import Pair
from gateway.quality.judge import Judge

CONCURRENCY = 4


class Judging:
    def __init__(self, judge: Judge, concurrency: int = CONCURRENCY) -> None:
        self.judge = judge
        self.concurrency = concurrency
        self.preferences: Counter[tuple[str, str]] = Counter()  # (candidate variant, worse | tie | better)
        self.skipped = 0  # pairs that came while `concurrency` were with the judge
        self.problem: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, pair: Pair) -> None:
        """Hands the pair to the judge (call from the event loop); returns at once."""
        if len(self._tasks) >= self.concurrency:
            self.skipped += 1
            return
        task = asyncio.get_running_loop().create_task(self._judge(pair))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Cancel the calls in flight: their verdicts would count for a provider that is gone."""
        for task in list(self._tasks):
            task.cancel()

    async def _judge(self, pair: Pair) -> None:
        judged = await self.judge.compare(_content(pair.original), _content(pair.shadow))
        if judged.preference is None:
            self.problem = judged.why
            return
        self.problem = None
        self.preferences[pair.shadow.variant, judged.preference] += 1


def _content(answer: Answer) -> str:
    """An answer as the judge sees it: its text, then its tool calls' arguments where it made any."""
    text, calls = answer.text or "", answer.calls or ""
    return f"{text}\n[tool calls] {calls}" if calls else text
