"""L2: "the candidate is at most (1+m) times slower in distribution", from histogram buckets (research §6.3 b)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.rollout.sequential._state import Detector, State, log_sum, mixture, require
from gateway.rollout.sequential.errors import (
    ratio_alternatives,
    request_shares,
    shiryaev_roberts_step,
    stratified_log_factor,
)

EDGE_TOLERANCE = 1e-5  # labels rounded to 6 significant digits are off by up to 5e-6 each (1e-6 is too tight)
RELEVANT_SHARE = (0.02, 0.6)  # baseline exceedance shares where an edge pair carries information
IRRELEVANT_WEIGHT = 0.01  # relative weight of the other pairs: small, never 0 (their wealth still counts)


def edge_pairs(edges: Sequence[float] | np.ndarray, max_slowdown: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i, j): j is the smallest edge >= (1+m) e_i, within EDGE_TOLERANCE; edges without one drop."""
    e = np.asarray(edges, dtype=float)
    require(e.ndim == 1 and len(e) > 0 and bool(np.all(np.isfinite(e))), "edges", "expected finite numbers")
    require(bool(np.all(e > 0)) and bool(np.all(np.diff(e) > 0)), "edges", "must be positive and ascending")
    require(math.isfinite(max_slowdown) and max_slowdown >= 0, "max_slowdown", "must be >= 0")
    j = np.searchsorted(e, (1 + max_slowdown) * e * (1 - EDGE_TOLERANCE), side="left")
    i = np.flatnonzero(j < len(e))
    require(len(i) > 0, "edges", f"no pair of edges is (1 + {max_slowdown}) apart")
    return i, j[i]


def pair_log_weights(base_exceedances: np.ndarray, base_requests: np.ndarray) -> np.ndarray:
    """log relevance of each pair (..., P) from the baseline's exceedance share *before* the look.

    Edges where the baseline exceeds 2-60 % of the time are where a slowdown shows; the tails see too few
    events and the head's exceedance ratio stays near 1. Uniform before any baseline data.
    """
    seen = base_requests[..., None] > 0
    share = base_exceedances / np.where(seen, base_requests[..., None], 1)
    low, high = RELEVANT_SHARE
    relevant = (share >= low) & (share <= high) | ~seen
    return np.where(relevant, 0.0, math.log(IRRELEVANT_WEIGHT))


def shift_look(
    pairs: tuple[np.ndarray, np.ndarray],
    alternatives: np.ndarray,
    log_lr: np.ndarray,
    log_wealth: np.ndarray,
    base_exceedances: np.ndarray,
    base_requests: np.ndarray,
    candidate: np.ndarray,
    baseline: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One look for many runs: log_lr (..., P, K), log_wealth and base_requests (...), base_exceedances
    (..., P); candidate and baseline (..., S, E+1) cumulative bucket increments per stratum, the total last.

    Returns the new (log_lr, log_wealth, base_exceedances, base_requests).
    """
    first, second = pairs
    cand_n, base_n = candidate[..., -1], baseline[..., -1]
    cand_x = cand_n[..., None] - candidate[..., second]  # candidate slower than (1+m) e_i
    base_x = base_n[..., None] - baseline[..., first]  # baseline slower than e_i
    share, compared = request_shares(cand_n, base_n)
    kept = compared[..., None]
    increment = stratified_log_factor(
        alternatives, 1.0, share, np.where(kept, cand_x, 0), np.where(kept, base_x, 0)
    )
    new_lr = log_lr + increment
    weights = pair_log_weights(base_exceedances, base_requests)
    gain = log_sum(mixture(new_lr) + weights) - log_sum(mixture(log_lr) + weights)
    return (
        new_lr,
        log_wealth + gain,
        base_exceedances + base_x.sum(axis=-2),
        base_requests + base_n.sum(axis=-1),
    )


def _cumulative(name: str, values: Sequence[float], size: int) -> np.ndarray:
    counts = np.asarray(values, dtype=float)
    require(counts.shape == (size,), name, f"expected {size} cumulative counts (the edges, then +Inf)")
    require(bool(np.all(np.isfinite(counts))) and bool(np.all(counts >= 0)), name, "counts must be >= 0")
    require(bool(np.all(np.abs(counts - np.round(counts)) < 1e-6)), name, "counts must be whole numbers")
    require(bool(np.all(np.diff(counts) >= 0)), name, "cumulative counts must not decrease along the edges")
    return np.round(counts)


@dataclass(frozen=True)
class ShiftTest(Detector, State):
    """H0: in every stratum and look, P_cand(T > e_j) <= P_base(T > e_i) for each edge pair (i, j).

    A candidate at most (1+m) times slower in distribution satisfies every pair, since e_j >= (1+m) e_i.
    Per pair this is R1 with psi0 = 1 on "candidate above e_j" against "baseline above e_i". Latency
    exceedances are common events, and the test stays exact for them: given a (stratum, look)'s request
    counts, the two exceedance counts are independent binomials with success probabilities q_c <= q_b, so
    given their sum the candidate's count is Fisher's noncentral hypergeometric with odds ratio <= 1. That
    is stochastically below the central hypergeometric, which is dominated in convex order by
    Binomial(sum, r) (Hoeffding 1963; research §5.1). Each factor (theta/r)^x ((1-theta)/(1-r))^(sum-x)
    with theta > r is convex and increasing in x, so its conditional mean is <= its binomial mean, 1.

    Pairs are combined by betting, not by a fixed mixture: wealth W_t = W_{t-1} * sum_k pi_k M_k,t / M_k,t-1
    with pi_k proportional to M_k,t-1 times a relevance computed from the baseline's data before look t
    (`pair_log_weights`). Since pi is fixed before the look and each ratio has conditional mean <= 1, W is a
    test supermartingale. With equal relevance it is exactly the uniform mixture over pairs; favouring
    the informative edges spends less of the evidence on pairs in the tails.

    The wealth is cumulative, so a slowdown that begins after hours of healthy traffic must first undo
    their negative evidence. `log_detector` forgets it: a Shiryaev-Roberts e-detector on the same
    per-look factors (`log_sr`, one per pair and alternative, R = (R + 1) * LR at each look with data,
    averaged with equal weights), whose false alarms within H looks are at most H/A at threshold A.
    """

    edges: tuple[float, ...]
    max_slowdown: float
    alternatives: tuple[float, ...]
    log_lr: tuple[float, ...]
    log_wealth: float
    baseline_requests: int
    baseline_exceedances: tuple[float, ...]
    candidate_requests: int
    log_sr: tuple[float, ...]
    steps: int

    @classmethod
    def new(cls, edges: Sequence[float] | np.ndarray, max_slowdown: float = 0.2) -> ShiftTest:
        edges = tuple(float(e) for e in edges)
        first, _ = edge_pairs(edges, max_slowdown)
        alternatives = ratio_alternatives(1.0)
        log_lr = (0.0,) * (len(first) * len(alternatives))
        return cls(edges, max_slowdown, alternatives, log_lr, 0.0, 0, (0.0,) * len(first), 0, log_lr, 0)

    def update(self, strata: Sequence[tuple[Sequence[float], Sequence[float]]]) -> ShiftTest:
        size = len(self.edges) + 1
        rows = []
        for i, stratum in enumerate(strata):
            require(len(stratum) == 2, f"strata[{i}]", "expected (candidate buckets, baseline buckets)")
            rows.append(
                [
                    _cumulative(f"strata[{i}].{side}", v, size)
                    for side, v in zip(("candidate", "baseline"), stratum, strict=True)
                ]
            )
        if not rows:
            return self
        counts = np.array(rows)  # (S, 2, E+1)
        pairs = edge_pairs(self.edges, self.max_slowdown)
        before = np.asarray(self.log_lr).reshape(len(pairs[0]), -1)
        log_lr, log_wealth, exceedances, requests = shift_look(
            pairs,
            np.asarray(self.alternatives),
            before,
            np.asarray(self.log_wealth),
            np.asarray(self.baseline_exceedances),
            np.asarray(float(self.baseline_requests)),
            counts[:, 0],
            counts[:, 1],
        )
        compared = bool(((counts[:, 0, -1] > 0) & (counts[:, 1, -1] > 0)).any())
        log_sr = shiryaev_roberts_step(
            np.asarray(self.log_sr).reshape(before.shape),
            np.asarray(self.steps > 0),
            np.asarray(compared),
            log_lr - before,
        )
        return ShiftTest(
            self.edges,
            self.max_slowdown,
            self.alternatives,
            tuple(log_lr.ravel().tolist()),
            float(log_wealth),
            int(requests),
            tuple(exceedances.tolist()),
            self.candidate_requests + int(counts[:, 0, -1].sum()),
            tuple(log_sr.ravel().tolist()),
            self.steps + compared,
        )

    @property
    def log_evalue(self) -> float:
        return self.log_wealth

    def _check(self) -> None:
        name = type(self).__name__
        try:
            pairs = len(edge_pairs(self.edges, self.max_slowdown)[0])
        except ValueError as error:
            raise ValueError(f"{name}.{error}") from None
        require(
            len(self.alternatives) > 0 and min(self.alternatives) > 1, f"{name}.alternatives", "must be > 1"
        )
        require(len(self.log_lr) == pairs * len(self.alternatives), f"{name}.log_lr", "length")
        require(len(self.log_sr) == len(self.log_lr), f"{name}.log_sr", "length")
        require(len(self.baseline_exceedances) == pairs, f"{name}.baseline_exceedances", "length")
        ok = all(0 <= x <= self.baseline_requests for x in self.baseline_exceedances)
        require(ok, f"{name}.baseline_exceedances", "must be within [0, baseline_requests]")
