"""L2 on exact per-request values: "the candidate is at most (1+m) times slower in distribution", by ranks.

The histogram test (latency.py) sees only exceedances of bucket edges, and only edge pairs at least (1+m)
apart: on vLLM's layout (edges up to 2.5x apart) it can tell only large slowdowns. With each request's own
value the comparison needs no edges: every candidate value is divided by (1+m) and ranked among the look's
baseline values of its stratum, and the ranks are bet on.

Ranks within the look, rather than against the baseline's quantiles from earlier looks, keep L2's
conditioning: a load swing that slows both variants in one look cancels, where a reference taken
before it would read it as the candidate's slowdown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gateway.rollout.sequential._state import Detector, MixedEvidence, State, require
from gateway.rollout.sequential.errors import shiryaev_roberts_step

# Scores besides the rank sum, which carries a shift of the whole distribution: "in the pooled top
# half", "... tenth", "... hundredth", which carry a slowdown of the slow requests alone.
RANK_LEVELS = (0.5, 0.9, 0.99)
BET_SIZES = (0.25, 0.5, 1.0, 2.0, 4.0)  # tilts lambda of the scores, which lie in [0, 1]
_SIDES = ("candidate", "baseline")
Values = Sequence[float] | np.ndarray  # one stratum's per-request seconds from one variant at one look


def pooled_ranks(candidate: np.ndarray, baseline: np.ndarray, max_slowdown: float) -> np.ndarray:
    """The ranks (1-based, ascending) of candidate / (1+m) among the pooled values of one stratum's look.

    A tie with a baseline value ranks the candidate below it: the candidate's favour, so ties (values
    rounded to milliseconds) can only lower the evidence against it.
    """
    scaled = np.sort(candidate) / (1 + max_slowdown)
    below = np.searchsorted(np.sort(baseline), scaled, side="left")
    return below + np.arange(1, len(scaled) + 1)


def rank_increments(
    bets: np.ndarray, levels: np.ndarray, ranks: np.ndarray, pooled: np.ndarray
) -> np.ndarray:
    """Each look's log factor per score and bet: ranks (..., S, C), 0 where a slot holds no request (a
    stratum's candidates, padded to C); pooled (..., S) the stratum's candidate plus baseline requests.
    Returns (..., F, K): F = 1 + len(levels) scores (the rank sum, then each level's count), K bets.

    A score is a(R) for R the pooled rank, increasing in R: R / (N+1), or 1 when R > q (N+1). The factor
    is exp(lambda * sum of the candidates' scores) / M(lambda)^n with M the mean of exp(lambda a) over
    all N ranks. Strata where a side had no request contribute nothing.
    """
    present = ranks > 0
    n = present.sum(axis=-1)
    size = pooled.astype(float)
    compared = (n > 0) & (pooled > n)
    safe = np.where(compared, size, 1.0)
    u = np.where(present, ranks / (safe[..., None] + 1), 0.0)
    tail_edges = np.multiply.outer(safe + 1, levels)  # (..., S, L): a rank above it scores 1
    in_tail = (ranks[..., None, :] > tail_edges[..., None]) & present[..., None, :]
    scores = np.concatenate([u.sum(axis=-1)[..., None], in_tail.sum(axis=-1)], axis=-1)  # (..., S, F)
    step = np.multiply.outer(1 / (safe + 1), bets)  # (..., S, K): lambda / (N+1)
    log_rank_sum = step + np.log(np.expm1(step * safe[..., None])) - np.log(np.expm1(step))
    log_rank_sum -= np.log(safe)[..., None]
    share = np.clip(safe[..., None] - np.floor(tail_edges), 0, safe[..., None]) / safe[..., None]
    log_tails = np.log1p(share[..., None] * np.expm1(bets))  # (..., S, L, K)
    log_mean = np.concatenate([log_rank_sum[..., None, :], log_tails], axis=-2)  # (..., S, F, K)
    factor = scores[..., None] * bets - n[..., None, None] * log_mean
    return np.where(compared[..., None, None], factor, 0.0).sum(axis=-3)


def by_stratum(ours: Mapping[str, Values], theirs: Mapping[str, Values]) -> list[tuple[Values, Values]]:
    """`update`'s strata from one look's values per stratum name (`stratum(segment, prompt_bucket)`) and
    variant: the names both variants reached, in name order."""
    return [
        (ours[name], theirs[name]) for name in sorted(ours) if len(ours[name]) and len(theirs.get(name, ()))
    ]


Ranker = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


def ranked_look(
    strata: Sequence[tuple[Values, Values]],
    rank: Ranker,
    max_slowdown: float,
    alternatives: Sequence[float],
    levels: Sequence[float],
) -> tuple[np.ndarray, int, int] | None:
    """One look of a rank test (ExactShiftTest's `pooled_ranks`, NotSlowerTest's `faster_ranks`): the
    log-factor increments over the strata both sides reached, and the candidate's and the baseline's
    values counted; None where no stratum was reached by both."""
    rows = []
    for i, stratum in enumerate(strata):
        require(len(stratum) == 2, f"strata[{i}]", "expected (candidate values, baseline values)")
        pair = tuple(_values(f"strata[{i}].{side}", v) for side, v in zip(_SIDES, stratum, strict=True))
        if len(pair[0]) and len(pair[1]):  # a stratum one side did not reach has nothing to compare
            rows.append(pair)
    if not rows:
        return None
    ranks = np.zeros((len(rows), max(len(c) for c, _ in rows)))
    for i, (candidate, baseline) in enumerate(rows):
        ranks[i, : len(candidate)] = rank(candidate, baseline, max_slowdown)
    pooled = np.array([len(c) + len(b) for c, b in rows])
    inc = rank_increments(np.asarray(alternatives), np.asarray(levels), ranks, pooled)
    return inc, sum(len(c) for c, _ in rows), sum(len(b) for _, b in rows)


def _values(name: str, values: Values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    require(array.ndim == 1, name, f"expected a sequence of seconds, got shape {array.shape}")
    require(bool(np.all(np.isfinite(array))), name, "values must be finite (no NaN or inf)")
    require(bool(np.all(array >= 0)), name, "values must be >= 0 seconds")
    return array


@dataclass(frozen=True)
class ExactShiftTest(MixedEvidence, Detector, State):
    """H0: in every stratum and look, candidate / (1+m) is stochastically no larger than the baseline.

    Given a (stratum, look)'s two request counts, at the boundary (candidate = (1+m) x baseline in
    distribution) the scaled candidate values and the baseline's are exchangeable, so the candidates'
    pooled ranks are a random subset of 1..N. A candidate at most (1+m) times slower only lowers them:
    each candidate's rank rises with its value, so coupling it with a boundary draw above it can only
    raise the score sum. exp(lambda x sum) is convex and increasing in the sum, and a sample without
    replacement is dominated in convex order by one with replacement (Hoeffding 1963), whose factor
    has mean exactly 1: each look's factor has conditional mean <= 1 (research §5.1, as R1 and L2).
    Shared load cancels as in L2: each (stratum, look) is compared only within itself.

    Scores (the rank sum, RANK_LEVELS' tail counts) and bets are mixed with equal weights (`log_evalue`);
    `log_detector` is the Shiryaev-Roberts e-detector on the same factors, as ShiftTest's.
    """

    max_slowdown: float
    levels: tuple[float, ...]
    alternatives: tuple[float, ...]
    log_lr: tuple[float, ...]
    log_sr: tuple[float, ...]
    candidate_requests: int
    baseline_requests: int
    steps: int

    @classmethod
    def new(cls, max_slowdown: float = 0.2) -> ExactShiftTest:
        require(math.isfinite(max_slowdown) and max_slowdown >= 0, "max_slowdown", "must be >= 0")
        zeros = (0.0,) * ((1 + len(RANK_LEVELS)) * len(BET_SIZES))
        return cls(float(max_slowdown), RANK_LEVELS, BET_SIZES, zeros, zeros, 0, 0, 0)

    def update(self, strata: Sequence[tuple[Values, Values]]) -> ExactShiftTest:
        """One look: per stratum (prompt-size bucket, segment), the candidate's and the baseline's values."""
        look = ranked_look(strata, pooled_ranks, self.max_slowdown, self.alternatives, self.levels)
        if look is None:
            return self
        inc, candidates, baselines = look
        shape = inc.shape
        log_sr = shiryaev_roberts_step(
            np.asarray(self.log_sr).reshape(shape), np.asarray(self.steps > 0), np.asarray(True), inc
        )
        return ExactShiftTest(
            self.max_slowdown,
            self.levels,
            self.alternatives,
            tuple((np.asarray(self.log_lr).reshape(shape) + inc).ravel().tolist()),
            tuple(log_sr.ravel().tolist()),
            self.candidate_requests + candidates,
            self.baseline_requests + baselines,
            self.steps + 1,
        )

    def _check(self) -> None:
        name = type(self).__name__
        require(self.max_slowdown >= 0, f"{name}.max_slowdown", "must be >= 0")
        require(all(0 < q < 1 for q in self.levels), f"{name}.levels", "must lie in (0, 1)")
        require(
            len(self.alternatives) > 0 and all(b > 0 for b in self.alternatives),
            f"{name}.alternatives",
            "must be non-empty and positive",
        )
        size = (1 + len(self.levels)) * len(self.alternatives)
        require(len(self.log_lr) == size, f"{name}.log_lr", "length")
        require(len(self.log_sr) == size, f"{name}.log_sr", "length")
        require(self.steps <= self.candidate_requests, f"{name}.steps", "more steps than requests")
