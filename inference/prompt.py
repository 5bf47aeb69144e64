"""The byte-level chat template both HTTP protocols share.

The model's tokens are bytes, so a prompt is the UTF-8 of a plain transcript, BOS first:

    <BOS>system: You are terse.
    user: Hi
    assistant:

one `role: content` line per turn, then `assistant: ` for the reply. A conversation that ends on an
assistant turn is continued instead (the Messages API's prefill): that turn gets no newline and no
new `assistant: ` header. Roles are written as given, so the OpenAI endpoint maps `developer` to
`system` before calling this.
"""

from __future__ import annotations

from collections.abc import Sequence

from inference.config import BOS

ASSISTANT = "assistant"


def chat_prompt(turns: Sequence[tuple[str, str]], system: str | None = None) -> list[int]:
    """Token ids for (role, text) turns under an optional system prompt."""
    lines = [f"system: {system}\n"] if system else []
    continues = bool(turns) and turns[-1][0] == ASSISTANT
    for index, (role, text) in enumerate(turns):
        last = index == len(turns) - 1
        lines.append(f"{role}: {text}" if last and continues else f"{role}: {text}\n")
    if not continues:
        lines.append(f"{ASSISTANT}: ")
    return [BOS, *"".join(lines).encode()]
