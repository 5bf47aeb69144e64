"""A provider's look with what the gateway measured itself (gateway/answers/):

- the answers that failed after their success status went out (an `event: error` or error chunk
  mid-stream, a stream cut before its final event). Envoy counts those as the status it sent (2xx), so
  without them a candidate that breaks its streams after `200` passes every error test. They are one
  more cumulative ERRORS series per variant (source ANSWERS_SOURCE), whose increments the analysis
  takes like any counter's; each is already among Envoy's requests.
- the output tokens of every measured answer, as the variant's GENERATED series in place of the
  servers' own counters (graystack's or vLLM's, where a server has one), so the capacity view's cost
  per million tokens exists for any server and counts what the dashboards count.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.answers.store import AnswerStore
from gateway.metrics.observations import ERRORS, GENERATED, CounterKey, Observations
from gateway.metrics.provider import MetricsProvider

ANSWERS_SOURCE = "gateway: answers failed after their status"
TOKENS_SOURCE = "gateway: output tokens of the answers measured"


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
        measured = self.answers.output_tokens
        tokens = {
            CounterKey(variant, GENERATED, source=TOKENS_SOURCE): float(n) for variant, n in measured.items()
        }
        servers = {
            key: value
            for key, value in seen.counters.items()
            if not (key.signal == GENERATED and key.variant in measured)
        }
        return replace(seen, counters={**servers, **failed, **tokens})
