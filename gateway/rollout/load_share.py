"""The candidate's share of recent requests, counted with decaying weights, and a confidence interval on it.
Pure. The latency checks compare a look only where the candidate's pods were not busier than the
baseline's (gateway/rollout/checks/latency.py), and the share of requests each variant got is what says so.

Each request counts 1 in the look it came, and its weight decays with every later look: the window. The
interval is Wilson's on the requests' effective number, sum(w)^2 / sum(w^2): a decayed sum of n requests
tells less than n undecayed ones, and the first looks' undecayed counts tell exactly what they hold, so
the same bound is right at a rollout's start and after hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Window:
    mine: float = 0.0  # the candidate's requests, weighted
    others: float = 0.0  # the baseline's
    squares: float = 0.0  # every counted request's squared weight, summed (the counts' spread)

    def add(self, mine: int, others: int, decay: float) -> Window:
        """This window with one look's requests added and every earlier request's weight times `decay`."""
        return Window(
            decay * self.mine + mine, decay * self.others + others, decay**2 * self.squares + mine + others
        )

    def estimate(self) -> float:
        """The candidate's share of the weighted requests; 0 before any."""
        total = self.mine + self.others
        return self.mine / total if total > 0 else 0.0

    def share(self, z: float) -> tuple[float, float]:
        """Wilson's interval on the candidate's share of the requests, `z` sigmas each side; (0, 1) before
        any request."""
        total = self.mine + self.others
        if total <= 0 or self.squares <= 0:
            return 0.0, 1.0
        n, share, z2 = total**2 / self.squares, self.estimate(), z * z
        centre = (share + z2 / (2 * n)) / (1 + z2 / n)
        spread = z * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        return max(0.0, centre - spread), min(1.0, centre + spread)


def saved_window(value: Any) -> Any:
    """A window as saved, or as a state saved before windows kept their squares wrote it, a [mine, others]
    pair decayed over 30 looks: its squares then at the steady state of such a sum, half the counts."""
    if isinstance(value, list | tuple) and len(value) == 2:
        mine, others = value
        return Window(mine, others, (mine + others) / 2)
    return value


def odds(share: float) -> float:
    """A share as the ratio of the candidate's requests to the baseline's (infinite at 1)."""
    return math.inf if share >= 1 else share / (1 - share)
