"""Output tokens per second, per variant, over the last few minutes of looks. Pure.

What a variant's pods cost an hour means little alone: status divides it by the output tokens they
served (cost per million output tokens, gateway/rollout/capacity.py `per_million_tokens`): the
gateway's measurement of every answer, else the servers' own counters (gateway/metrics/answered.py).
Each look's increments (gateway/rollout/increments.py) cover the time since the previous look, so the
rate is the tokens of every look but the window's first over the time the window spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WINDOW = 300.0  # seconds of looks the rate is taken over


@dataclass(frozen=True)
class TokenRates:
    looks: tuple[
        tuple[float, Mapping[str, int]], ...
    ] = ()  # (when, tokens per variant since the look before)

    def add(self, now: float, generated: Mapping[str, int]) -> TokenRates:
        kept = tuple(look for look in self.looks if now - look[0] <= WINDOW)
        return TokenRates((*kept, (now, dict(generated))))

    def per_second(self) -> dict[str, float]:
        """Tokens per second per variant; empty until two looks span some time."""
        if len(self.looks) < 2 or self.looks[-1][0] <= self.looks[0][0]:
            return {}
        span = self.looks[-1][0] - self.looks[0][0]
        totals: dict[str, float] = {}
        for _, generated in self.looks[1:]:
            for variant, tokens in generated.items():
                totals[variant] = totals.get(variant, 0.0) + tokens
        return {variant: tokens / span for variant, tokens in totals.items()}
