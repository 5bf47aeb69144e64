"""A provider's look with what the gateway measured itself (gateway/answers/):

- on the user's own gateway (`traffic`, issue 36), whose counters are not graystack's to read: the
  requests and errors themselves, as every answer its access log brought and every one a client saw
  fail (the cumulative REQUESTS and ERRORS series, source TRAFFIC_SOURCE), in place of Envoy's.
- the answers that failed after their success status went out (an `event: error` or error chunk
  mid-stream, a stream cut before its final event). Envoy counts those as the status it sent (2xx), so
  without them a candidate that breaks its streams after `200` passes every error test. They are one
  more cumulative ERRORS series per variant (source ANSWERS_SOURCE), whose increments the analysis
  takes like any counter's; each is already among Envoy's requests.
- the time to first token and time per output token of every answer measured since the last look, as
  exact samples per variant and stratum (what `analysis.latency_source: answers` compares). Answers
  that failed, or that a fallback retry moved to another variant, are left out: their times are not
  one server's.
- the output tokens of every measured answer, as the variant's GENERATED series in place of the
  servers' own counters (graystack's or vLLM's, where a server has one), so the capacity view's cost
  per million tokens exists for any server and counts what the dashboards count.
- with cohorts (`clients`), the observations the error tests count in place of Envoy's requests and
  errors: every unkeyed answer and each client's first answer on a variant in the stage
  (client_units.py), as the cumulative UNITS and UNIT_ERRORS series (failed: a failure the client saw,
  or an attempt a fallback retry moved to another variant), and the exact latencies of those answers
  only. Envoy's counters stay as they are, for the load and "measurements missing" checks.
- with `analysis.quality`, the answer-quality series (gateway/quality/counts.py, given as a QualitySource): greedy shadow pairs compared at the
  gateway (in place of the servers' own COMPARED and DIFFERED) and the captured answers' form.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Protocol

from gateway.answers.answer import Answer
from gateway.answers.store import AnswerStore
from gateway.metrics.client_units import ClientUnits
from gateway.metrics.observations import (
    COMPARED,
    DIFFERED,
    ERRORS,
    GENERATED,
    ITL,
    REQUESTS,
    TTFT,
    UNIT_ERRORS,
    UNITS,
    CounterKey,
    Observations,
    SampleKey,
    stratum,
)
from gateway.metrics.provider import MetricsProvider

ANSWERS_SOURCE = "gateway: answers failed after their status"
TOKENS_SOURCE = "gateway: output tokens of the answers measured"
UNITS_SOURCE = "gateway: answers, each client once per variant"
TRAFFIC_SOURCE = "gateway: the answers the user's gateway logged"


class QualitySource(Protocol):
    """The answer-quality series `analysis.quality` asks for (gateway/quality/counts.py), given to the
    look as a part: it is fed each look's answers, and closed when its provider is replaced."""

    def add(
        self, answers: Iterable[Answer], observed: Iterable[Answer], now: float
    ) -> Mapping[CounterKey, float]:
        """The cumulative quality series with this look's answers counted (`observed`: those the tests
        count, with cohorts each client once)."""
        ...

    @property
    def judge_problem(self) -> str | None:
        """Why the judge's last call gave no verdict (None: it gave one, or there is no judge)."""
        ...

    def close(self) -> None:
        """Stop what it runs in the background (the judge's calls in flight are cancelled)."""
        ...


class WithAnswers:
    def __init__(
        self,
        provider: MetricsProvider,
        answers: AnswerStore,
        clients: bool = False,
        quality: QualitySource | None = None,
        clock: Callable[[], float] = time.monotonic,
        traffic: bool = False,
    ) -> None:
        self.provider = provider
        self.traffic = traffic
        self.answers = answers
        self.quality = quality
        self.clock = clock
        self._cursor = answers.cursor  # the next look's samples are the answers measured after it
        self.units = ClientUnits() if clients else None
        self._units: Counter[str] = Counter()
        self._unit_errors: Counter[str] = Counter()

    def new_count(self) -> None:
        if self.units is not None:
            self.units.restart()
        self.provider.new_count()

    def close(self) -> None:
        if self.quality is not None:
            self.quality.close()
        self.provider.close()

    async def observe(self) -> Observations:
        seen = await self.provider.observe()
        batch = self.answers.since(self._cursor)
        self._cursor = batch.cursor
        if seen.error is not None:
            return seen
        observed = list(batch.answers) if self.units is None else self.units.take(batch.answers)
        failed = (
            self._traffic()
            if self.traffic
            else {
                CounterKey(variant, ERRORS, source=ANSWERS_SOURCE): float(count)
                for variant, count in self.answers.failed_after_start.items()
            }
        )
        units = self._count_units(observed) if self.units is not None else {}
        if self.quality is not None:
            units |= self.quality.add(batch.answers, observed, self.clock())
        measured = self.answers.output_tokens
        tokens = {
            CounterKey(variant, GENERATED, source=TOKENS_SOURCE): float(n) for variant, n in measured.items()
        }
        servers = {
            key: value
            for key, value in seen.counters.items()
            if not (key.signal == GENERATED and key.variant in measured)
            and not (self.quality is not None and key.signal in (COMPARED, DIFFERED))
        }
        counters = {**servers, **failed, **tokens, **units}
        problem = self.quality.judge_problem if self.quality is not None else None
        return replace(seen, counters=counters, samples=samples(observed), judge_problem=problem)

    def _traffic(self) -> dict[CounterKey, float]:
        """Every answer as a request and every one that failed as an error (the user's gateway)."""
        return {
            CounterKey(variant, signal, source=TRAFFIC_SOURCE): float(counts[variant])
            for variant in self.answers.answered
            for signal, counts in ((REQUESTS, self.answers.answered), (ERRORS, self.answers.failed))
        }

    def _count_units(self, measured: Iterable[Answer]) -> dict[CounterKey, float]:
        """The cumulative UNITS and UNIT_ERRORS series, with this look's observations added."""
        for answer in measured:
            self._units[answer.variant] += 1
            self._unit_errors[answer.variant] += answer.failed or answer.fell_back
        return {
            CounterKey(variant, signal, source=UNITS_SOURCE): float(counts[variant])
            for variant in self._units
            for signal, counts in ((UNITS, self._units), (UNIT_ERRORS, self._unit_errors))
        }


def samples(answers: Iterable[Answer]) -> dict[SampleKey, tuple[float, ...]]:
    """TTFT per stratum(segment, prompt_bucket), time per output token per stratum(segment), per variant."""
    found: defaultdict[SampleKey, list[float]] = defaultdict(list)
    for answer in answers:
        if answer.failed or answer.fell_back:
            continue
        if answer.ttft is not None:
            found[SampleKey(answer.variant, TTFT, stratum(answer.segment, answer.prompt_bucket))].append(
                answer.ttft
            )
        if answer.itl is not None:
            found[SampleKey(answer.variant, ITL, stratum(answer.segment))].append(answer.itl)
    return {key: tuple(values) for key, values in found.items()}
