"""A provider's look with what the gateway measured itself (gateway/answers/) added: the answers that
failed after their success status went out (an `event: error` or error chunk mid-stream, a stream cut
before its final event). Envoy counts those as the status it sent (2xx), so without them a candidate
that breaks its streams after `200` passes every error test.

They are added as one more cumulative ERRORS series per variant (source ANSWERS_SOURCE), so the
analysis takes their increments like any counter's, and each is already among Envoy's requests.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.answers.store import AnswerStore
from gateway.metrics.observations import ERRORS, CounterKey, Observations
from gateway.metrics.provider import MetricsProvider

ANSWERS_SOURCE = "gateway: answers failed after their status"


class WithAnswers:
    def __init__(self, provider: MetricsProvider, answers: AnswerStore) -> None:
        self.provider = provider
        self.answers = answers

    async def observe(self) -> Observations:
        seen = await self.provider.observe()
        if seen.error is not None:
            return seen
        failed = {
            CounterKey(variant, ERRORS, source=ANSWERS_SOURCE): float(count)
            for variant, count in self.answers.failed_after_start.items()
        }
        return replace(seen, counters={**seen.counters, **failed})
