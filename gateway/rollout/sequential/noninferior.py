"""The promote side on exact per-request values: "the candidate is NOT more than (1+m) times slower".

ExactShiftTest (exact.py) gathers evidence that the candidate is slower than (1+m) x the baseline, to
roll it back. An `approval: evidence` gate needs the mirror image, evidence of non-inferiority:
H0 "the candidate is slower than (1+m) x the baseline" is rejected, and the step approved, once this
e-process reaches log(1/alpha). It is ExactShiftTest's statistic on the negated values: every
candidate value divided by (1+m) is ranked among the look's baseline values of its stratum from the
slow end, so a high rank is a candidate answer faster than the scaled baseline's, and the ranks are bet
on with the same kernel (`rank_increments`). No SR detector: an approval is a one-time decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.rollout.sequential._state import MixedEvidence, State, require
from gateway.rollout.sequential.exact import BET_SIZES, RANK_LEVELS, Values, pooled_ranks, ranked_look


def faster_ranks(candidate: np.ndarray, baseline: np.ndarray, max_slowdown: float) -> np.ndarray:
    """The ranks (1-based) of candidate / (1+m) among the pooled values of one stratum's look, counted
    from the slowest: `pooled_ranks` on the negated values.

    A tie with a baseline value ranks the candidate as the slower of the two: ties (values rounded to
    milliseconds) can only lower the evidence for approval.
    """
    return pooled_ranks(-np.asarray(candidate, dtype=float), -np.asarray(baseline, dtype=float), max_slowdown)


@dataclass(frozen=True)
class NotSlowerTest(MixedEvidence, State):
    """H0: in every stratum and look, candidate / (1+m) is stochastically no smaller than the baseline
    (the candidate is at least (1+m) times slower). Rejected: the candidate is not that much slower.

    Validity, as ExactShiftTest's on negated values: given a (stratum, look)'s two request counts, at the
    boundary (candidate = (1+m) x baseline in distribution) the scaled candidate values and the
    baseline's are exchangeable, so the candidates' ranks from the slow end are a random subset of 1..N;
    a candidate slower still only lowers them, and with it each factor exp(lambda x score sum) /
    M(lambda)^n, convex and increasing in the sum (a draw without replacement is dominated in convex
    order by one with replacement, whose factor has mean 1: Hoeffding 1963). So each look's factor has
    conditional mean <= 1 under H0, their product is a nonnegative supermartingale, and by Ville's
    inequality P(its log ever reaches log(1/alpha)) <= alpha, for any look schedule and weights. The
    scores (the rank sum, and RANK_LEVELS' counts "in the pooled fastest half, tenth, hundredth") and
    the bets are mixed with equal weights (`log_evalue`).
    """

    max_slowdown: float
    levels: tuple[float, ...]
    alternatives: tuple[float, ...]
    log_lr: tuple[float, ...]
    candidate_requests: int
    baseline_requests: int
    looks: int

    @classmethod
    def new(cls, max_slowdown: float = 0.1) -> NotSlowerTest:
        require(math.isfinite(max_slowdown) and max_slowdown > 0, "max_slowdown", "must be > 0")
        zeros = (0.0,) * ((1 + len(RANK_LEVELS)) * len(BET_SIZES))
        return cls(float(max_slowdown), RANK_LEVELS, BET_SIZES, zeros, 0, 0, 0)

    def update(self, strata: Sequence[tuple[Values, Values]]) -> NotSlowerTest:
        """One look: per stratum (prompt-size bucket, segment), the candidate's and the baseline's values."""
        look = ranked_look(strata, faster_ranks, self.max_slowdown, self.alternatives, self.levels)
        if look is None:
            return self
        inc, candidates, baselines = look
        return NotSlowerTest(
            self.max_slowdown,
            self.levels,
            self.alternatives,
            tuple((np.asarray(self.log_lr) + inc.ravel()).tolist()),
            self.candidate_requests + candidates,
            self.baseline_requests + baselines,
            self.looks + 1,
        )

    def _check(self) -> None:
        name = type(self).__name__
        require(self.max_slowdown > 0, f"{name}.max_slowdown", "must be > 0")
        require(all(0 < q < 1 for q in self.levels), f"{name}.levels", "must lie in (0, 1)")
        require(
            len(self.alternatives) > 0 and all(b > 0 for b in self.alternatives),
            f"{name}.alternatives",
            "must be non-empty and positive",
        )
        size = (1 + len(self.levels)) * len(self.alternatives)
        require(len(self.log_lr) == size, f"{name}.log_lr", "length")
