"""Code-completion requests for local traffic: prefixes of held-out standard-library source.

The trained model knows Python source (inference/training/data.py), and a Messages conversation that
ends on an assistant turn is continued, so a prefilled prefix is a completion in its own domain.
Held-out files (never trained on) and many distinct prefixes make the shadow agreement a measurement
of the candidate's answers, not of one prompt (which agrees always or never).
"""

from __future__ import annotations

from graystack.local.rollout_stack import Conversation
from inference.training.data import is_held_out, stdlib_files, stdlib_root

ASK = "Continue this Python."


def held_out_completions(count: int = 500, length: int = 64) -> tuple[Conversation, ...]:
    """`count` prefixes of `length` characters, spread over the held-out files; the same on every run."""
    root = stdlib_root()
    text = "".join(
        (root / name).read_text(encoding="utf-8", errors="replace")
        for name in stdlib_files(root)
        if is_held_out(name)
    )
    step = max(1, (len(text) - length) // count)
    prefixes = (text[start : start + length] for start in range(0, step * count, step))
    return tuple((("user", ASK), ("assistant", prefix)) for prefix in prefixes)
