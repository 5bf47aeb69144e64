"""The answers measured since the rollout last looked: a bounded, in-memory queue that readers page
through with a cursor, so two readers (the analysis, a dashboard) never take answers from each other.

    batch = store.since(cursor)     answers kept after `cursor`, oldest first; batch.cursor for next time
    batch.missed                    answers evicted (the store was full) before this reader saw them

Bounded by `capacity` answers and by `text_budget` bytes of captured text (`analysis.quality`: an answer
can carry up to its `max_answer_bytes`), the oldest going first and counted as evicted, so a reader that
stops reading costs memory up to the bound, not more. `counts` tells "no traffic" (nothing received) from
"measurements missing" (Envoy sent requests, nothing arrived: compare with Envoy's request counters and
its `access_logs.grpc_access_log.logs_dropped`).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from gateway.answers.answer import Answer

CAPACITY = 200_000  # answers; ~100 B each as a frozen dataclass plus its strings: tens of MB at most
TEXT_BUDGET = 128 * 1024 * 1024  # bytes of captured answer text (characters, counted as bytes) kept


@dataclass
class Counts:
    """Access-log entries received, by what became of them; `last_at`: wall time of the last one."""

    kept: int = 0
    ignored: int = 0  # not a variant's answer (no cluster chosen)
    unreadable: int = 0  # raised while being read: logged, never fatal
    evicted: int = 0
    last_at: float | None = None

    @property
    def received(self) -> int:
        return self.kept + self.ignored + self.unreadable


@dataclass(frozen=True)
class Batch:
    answers: tuple[Answer, ...]
    cursor: int
    missed: int = 0


@dataclass
class AnswerStore:
    """Per variant whose server answered, cumulative (never evicted): `failed_after_start`, the answers
    that failed after their success status went out (the errors Envoy's counters cannot see), and
    `output_tokens`, the tokens they carried (the servers' `usage`, else content events counted).
    `routed`: the answers that went to a client (not a mirrored copy's), and per variant `answered` (those
    answers) and `failed` (those a client saw fail); `keyed`: those whose request
    carried a cohort key, by the `routing.affinity` source that gave it (cumulative too: their ratio is
    the share of requests with a key). `misnamed`: the answers whose server named itself other than the
    variant Envoy sent them to, by (that variant, the server's name): a deployment mix-up to tell, which
    changes no count (an A/A run's two graystack servers both name themselves `baseline`)."""

    capacity: int = CAPACITY
    text_budget: int = TEXT_BUDGET
    counts: Counts = field(default_factory=Counts)
    failed_after_start: Counter[str] = field(default_factory=Counter)
    output_tokens: Counter[str] = field(default_factory=Counter)
    routed: int = 0
    answered: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    keyed: Counter[str] = field(default_factory=Counter)
    misnamed: Counter[tuple[str, str]] = field(default_factory=Counter)
    _answers: deque[Answer] = field(default_factory=deque)
    _first: int = 0  # the sequence number of _answers[0]; answers are numbered from 0 as they arrive
    _text: int = 0  # captured text held by _answers

    def add(self, answer: Answer, now: float) -> None:
        self._answers.append(answer)
        self._text += _text_size(answer)
        self.counts.kept += 1
        self.counts.last_at = now
        if answer.failed_after_start:
            self.failed_after_start[answer.server] += 1
        if answer.output_tokens:
            self.output_tokens[answer.server] += answer.output_tokens
        if (named := answer.misnamed) is not None:
            self.misnamed[answer.server, named] += 1
        if not answer.shadow:
            self.routed += 1
            self.answered[answer.server] += 1
            self.failed[answer.server] += answer.failed
            if answer.affinity is not None:
                self.keyed[answer.affinity] += 1
        while len(self._answers) > self.capacity or self._text > self.text_budget:
            self._text -= _text_size(self._answers.popleft())
            self._first += 1
            self.counts.evicted += 1

    def ignore(self, now: float, unreadable: bool = False) -> None:
        if unreadable:
            self.counts.unreadable += 1
        else:
            self.counts.ignored += 1
        self.counts.last_at = now

    @property
    def cursor(self) -> int:
        """The cursor a reader that wants only answers from now on starts from."""
        return self._first + len(self._answers)

    def since(self, cursor: int = 0) -> Batch:
        start = max(cursor, self._first)
        taken = tuple(self._answers[i - self._first] for i in range(start, self.cursor))
        return Batch(answers=taken, cursor=self.cursor, missed=start - cursor if cursor < start else 0)


def _text_size(answer: Answer) -> int:
    return len(answer.text or "") + len(answer.calls or "")
