"""Conversations for the load test's opt-in conversation user (the locustfile's ConversationUser), kept
apart from Locust so they can be tested without a runner.

A simulated user keeps one identity for all its conversations, sent as the `x-user-id` header and as the
Messages API's own body field for it, `metadata.user_id` (the Messages API has no `user` field; graystack's
model server refuses unknown fields), so cohorts keyed on either (`routing.affinity: [{header: x-user-id}]`
or `[{body: metadata.user_id}]`) keep the user on one variant. Each turn sends every earlier message, the
answers included, and one new user message, so a server's prefix cache could serve all but the new
message; after the last turn the user starts a new conversation, and so does a turn that would carry more
than the conversation's byte budget (a chat full for the model's context: a person starts a new one, and the
load test sends nothing a server must refuse as too long). Per turn after a conversation's first,
Stickiness counts whether it reached the variant (`x-graystack-variant`) and, where both answers named
their pod (POD_HEADER, sent by the stand-in upstream), the pod of the turn before.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields

from loadtests import config

USER_HEADER = "x-user-id"


@dataclass(frozen=True)
class Reached:
    """Where a turn's answer came from: its variant and, when the server named it, its pod."""

    variant: str
    pod: str | None


@dataclass
class Stickiness:
    """Turns after a conversation's first, and how many reached the variant (the pod) of the turn before."""

    turns: int = 0
    same_variant: int = 0
    pod_turns: int = 0  # turns whose answer and the previous turn's both named their pod
    same_pod: int = 0

    def count(self, previous: Reached, now: Reached) -> None:
        self.turns += 1
        self.same_variant += now.variant == previous.variant
        if previous.pod is not None and now.pod is not None:
            self.pod_turns += 1
            self.same_pod += now.pod == previous.pod

    def add(self, counts: dict[str, int]) -> None:
        """Add another tally's counts (a worker's report, in distributed mode)."""
        for name, value in counts.items():
            setattr(self, name, getattr(self, name) + value)

    def drain(self) -> dict[str, int]:
        """The counts so far, as a report (reset to zero)."""
        counts = asdict(self)
        for f in fields(self):
            setattr(self, f.name, 0)
        return counts

    @property
    def variant_share(self) -> float | None:
        return self.same_variant / self.turns if self.turns else None

    @property
    def pod_share(self) -> float | None:
        return self.same_pod / self.pod_turns if self.pod_turns else None


class Conversation:
    """One user's conversation of `turns` turns: the messages so far and where the last turn went."""

    def __init__(
        self,
        user_id: str,
        turns: int,
        prompt_lengths: dict[int, float],
        rng: random.Random,
        max_bytes: int = config.DEFAULT_CONVERSATION_BYTES,
    ) -> None:
        if turns < 1:
            raise ValueError(f"a conversation has at least 1 turn, not {turns}")
        if max_bytes < max(prompt_lengths):
            raise ValueError(
                f"a conversation budget of {max_bytes} bytes holds no {max(prompt_lengths)}-byte prompt"
            )
        self.user_id = user_id
        self.turns = turns
        self.prompt_lengths = prompt_lengths
        self.rng = rng
        self.max_bytes = max_bytes
        self.messages: list[dict[str, str]] = []
        self.last: Reached | None = None

    @property
    def done(self) -> bool:
        return len(self.messages) >= 2 * self.turns

    def ask(self) -> list[dict[str, str]]:
        """The next turn's messages: every earlier one and a new user message; only the new one where
        all would pass the byte budget (the conversation starts again from it)."""
        length = config.weighted_choice(self.prompt_lengths, self.rng)
        if sum(len(m["content"].encode()) for m in self.messages) + length > self.max_bytes:
            self.messages, self.last = [], None
        return [*self.messages, {"role": "user", "content": config.prompt_text(length, self.rng)}]

    def answered(self, asked: list[dict[str, str]], answer: str, reached: Reached, tally: Stickiness) -> None:
        """A turn answered in full: its answer joins the conversation, and where it went is counted."""
        self.messages = [*asked, {"role": "assistant", "content": answer}]
        if self.last is not None:
            tally.count(self.last, reached)
        self.last = reached

    def headers(self) -> dict[str, str]:
        return {USER_HEADER: self.user_id}

    def metadata(self) -> dict[str, str]:
        return {"user_id": self.user_id}
