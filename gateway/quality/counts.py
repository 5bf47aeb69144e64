"""A look's answer-quality counts from the answers the gateway captured (`analysis.quality`):

- greedy agreement: each shadow copy paired with its original (gateway/answers/pairs.py) whose request
  asked for greedy decoding (temperature 0), both answered whole by their own variant: COMPARED for the
  candidate, and DIFFERED where the two answers' text or tool calls differ. These replace the servers'
  own counters (`graystack serve --compare-with`): one way to compare answers, for any server.
- structure: every captured answer a variant's server gave whole (a failure is the error tests' to
  count), checked for what a client's code would trip on (gateway/quality/structure.py): STRUCTURED,
  MALFORMED and CUT (at the token limit) per variant and segment, so the candidate's share is compared with the baseline's in the same
  segments, live (`capture_percent`) and in a shadow stage (copy against original).
- the judge (with `quality.judge`): every pair both of whose answers can be judged goes to it in the
  background (gateway/quality/judging.py); its verdicts so far are JUDGED (decisive), LOST (the
  candidate's answer worse) and TIED, and `judge_problem` why its last call gave none.
Cumulative series, as for every counter the analysis reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gateway.answers.answer import Answer
from gateway.answers.pairs import Pair, PairStore
from gateway.metrics.observations import (
    COMPARED,
    CUT,
    DIFFERED,
    JUDGED,
    LOST,
    MALFORMED,
    STRUCTURED,
    TIED,
    CounterKey,
)
from gateway.quality.judging import Judging
from gateway.quality.structure import malformed, problems

QUALITY_SOURCE = "gateway: captured answers"


def judged(answer: Answer) -> bool:
    """Whether an answer's content can be judged: captured, readable, and given whole by its own variant."""
    return (
        answer.captured
        and not answer.text_unreadable
        and answer.ending == "complete"
        and not answer.failed
        and not answer.fell_back
    )


def compared(pair: Pair) -> bool:
    """Whether a pair sets two variants side by side. graystack's routes copy only the requests the split
    sends elsewhere than the mirror's variant (gateway/envoy/routes.py); a Gateway API mirror filter copies
    a rule's every request, its own variant's too, and such a pair compares the variant with itself."""
    return pair.original.variant != pair.shadow.variant and judged(pair.original) and judged(pair.shadow)


def greedy(pair: Pair) -> bool:
    return pair.original.temperature == 0 and compared(pair)


def differ(pair: Pair) -> bool:
    ours, theirs = pair.shadow, pair.original
    return (ours.text or "", ours.calls or "") != (theirs.text or "", theirs.calls or "")


class QualityCounts:
    """The cumulative quality series, fed each look's answers."""

    def __init__(self, judging: Judging | None = None) -> None:
        self.judging = judging
        self.pairs = PairStore()
        self._counts: Counter[tuple[str, str, str]] = Counter()  # (variant, signal, segment)

    def add(
        self, answers: Iterable[Answer], observed: Iterable[Answer], now: float
    ) -> dict[CounterKey, float]:
        """`answers`: every answer of the look (the pairs are made of them); `observed`: those the tests
        count (with cohorts, each client once: client_units.py), whose form is checked."""
        for pair in filter(None, (self.pairs.add(answer, now) for answer in answers)):
            if self.judging is not None and compared(pair):
                self.judging.submit(pair)
            if greedy(pair):
                self._counts[pair.shadow.variant, COMPARED, ""] += 1
                self._counts[pair.shadow.variant, DIFFERED, ""] += differ(pair)
        for answer in observed:
            if judged(answer):
                self._counts[answer.variant, STRUCTURED, answer.segment] += 1
                kinds = problems(answer)
                self._counts[answer.variant, MALFORMED, answer.segment] += malformed(kinds)
                self._counts[answer.variant, CUT, answer.segment] += "cut_by_length" in kinds
        found = {
            CounterKey(variant, signal, segment, source=QUALITY_SOURCE): float(count)
            for (variant, signal, segment), count in self._counts.items()
        }
        return found | self._preferences()

    def _preferences(self) -> dict[CounterKey, float]:
        if self.judging is None:
            return {}
        preferences = self.judging.preferences
        found: Counter[tuple[str, str]] = Counter()
        for (variant, preference), count in preferences.items():
            found[variant, JUDGED] += count if preference != "tie" else 0
            found[variant, LOST] += count if preference == "worse" else 0
            found[variant, TIED] += count if preference == "tie" else 0
        return {
            CounterKey(variant, signal, source=QUALITY_SOURCE): float(count)
            for (variant, signal), count in found.items()
        }

    def close(self) -> None:
        if self.judging is not None:
            self.judging.close()

    @property
    def judge_problem(self) -> str | None:
        return self.judging.problem if self.judging is not None else None
