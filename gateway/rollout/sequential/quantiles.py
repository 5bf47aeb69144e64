"""Anytime-valid confidence sequences for one variant's latency quantiles, on a fixed log grid. Pure.

The construction (a sign-test confidence sequence, stated here because the issue leaves it open): for a
grid edge e, each observation's 1{X <= e} is Bernoulli(F(e)), and the p-quantile q = inf{x: F(x) >= p}
satisfies F(e) >= p exactly where e >= q. Two one-sided mixtures of Bernoulli likelihood ratios against
p, over a Beta(k p, k (1-p)) prior cut to one side of p, test the two halves:
- `low`, mixing over p' < p: a supermartingale wherever F(e) >= p (each factor's mean,
  F p'/p + (1-F)(1-p')/(1-p), falls as F grows and is 1 at F = p); crossing log(1/alpha) shows q > e;
- `high`, mixing over p' > p: a supermartingale wherever F(e) < p; crossing shows q <= e.
By Ville's inequality each crosses, under its null, with probability at most alpha at any look ever. No
union over the grid is spent: both statistics are monotone in the count below e (low falls, high rises),
and the count is monotone in e, so a wrong claim at any edge implies one at the edge next to q (the first
edge at or above q for `low`, the last below it for `high`), a single fixed supermartingale. `bounds_batch`
runs each side at alpha/2, so [lower, upper] covers q at every look at once with probability >= 1 - alpha,
however often it is read and whatever the look sizes. It assumes each variant's latencies are
independent draws from one distribution over the experiment (randomised traffic, steady load).

The grid (GRID_RATIO apart, MIN_EDGE to MAX_EDGE seconds) is fixed in advance, never taken from the data,
so the bounds are grid edges: a quantile is located to within a factor GRID_RATIO. A variant keeps only
its counts per grid bin (sparse), which the rollout state can carry.

`bounds_batch` takes leading axes of independent runs, so the simulation (bench/experiment.py) runs the
code that ships; the bounds are found by bisection over the grid (the statistics are monotone in e).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from scipy.special import betainc, betaincc, betaln

MIN_EDGE = 1e-4  # seconds: below, every value counts as at the first edge
MAX_EDGE = 1e3  # seconds: above, a value counts in n but below no edge
GRID_RATIO = 1.02
EDGES = np.geomspace(MIN_EDGE, MAX_EDGE, math.ceil(math.log(MAX_EDGE / MIN_EDGE) / math.log(GRID_RATIO)) + 1)
PRIOR_STRENGTH = 50.0  # k: the prior's p' spread is about sqrt(p (1-p) / k), a few points of F


def bin_of(values: Iterable[float]) -> np.ndarray:
    """Grid bin of each value: i counts it at EDGES[i] and above; len(EDGES) is above the grid."""
    return np.searchsorted(EDGES, np.asarray(list(values), dtype=float), side="left")


def add_values(counts: Mapping[int, int], values: Iterable[float]) -> dict[int, int]:
    """`counts` (bin -> observations) with `values` added."""
    merged = dict(counts)
    bins, added = np.unique(bin_of(values), return_counts=True)
    for index, count in zip(bins.tolist(), added.tolist(), strict=True):
        merged[index] = merged.get(index, 0) + count
    return merged


def cumulative(counts: Mapping[int, int]) -> tuple[np.ndarray, int]:
    """(observations at or below each edge, all observations) from sparse bin counts."""
    dense = np.zeros(len(EDGES) + 1)
    for index, count in counts.items():
        dense[index] += count
    return np.cumsum(dense[:-1]), int(dense.sum())


def _log_evalue(below: np.ndarray, n: np.ndarray, p: float, side: str) -> np.ndarray:
    """log of the one-sided mixture (`low`: p' < p, `high`: p' > p) at `below` of `n` observations."""
    a, b = PRIOR_STRENGTH * p, PRIOR_STRENGTH * (1 - p)
    post_a, post_b = a + below, b + n - below
    part = betainc if side == "low" else betaincc  # the posterior's (and the prior's) mass on that side
    with np.errstate(divide="ignore"):  # a mass that underflows to 0 is no evidence: -inf, never a bound
        mass = np.log(part(post_a, post_b, p))
    prior = math.log(float(part(a, b, p)))
    likelihood = below * math.log(p) + (n - below) * math.log1p(-p)
    return betaln(post_a, post_b) - betaln(a, b) + mass - prior - likelihood


def _first_edge(cum: np.ndarray, n: np.ndarray, p: float, side: str, bound: float) -> np.ndarray:
    """Per run, the first edge index where `low` falls below `bound` (side low) or `high` reaches it
    (side high), len(EDGES) if none: by bisection, since `low` only falls and `high` only rises along
    the grid."""
    rows = np.arange(cum.shape[0])
    lo, hi = np.zeros(cum.shape[0], dtype=int), np.full(cum.shape[0], len(EDGES), dtype=int)
    while np.any(lo < hi):
        open_ = lo < hi
        mid = np.minimum((lo + hi) // 2, len(EDGES) - 1)
        value = _log_evalue(cum[rows, mid], n, p, side)
        hit = value >= bound if side == "high" else value < bound
        hi = np.where(open_ & hit, mid, hi)
        lo = np.where(open_ & ~hit, mid + 1, lo)
    return lo


def bounds_batch(cum: np.ndarray, n: np.ndarray, p: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) on the p-quantile per run, each side at alpha/2: `cum` (runs, edges) holds the
    observations at or below each edge, `n` (runs,) all of them. lower is 0 and upper infinite until
    the data show otherwise."""
    bound = math.log(2 / alpha)
    # low is >= bound on a prefix of the grid: the last such edge is the lower bound (q lies above it)
    first_not_low = _first_edge(cum, n, p, "low", bound)
    lower = np.where(first_not_low > 0, EDGES[np.maximum(first_not_low - 1, 0)], 0.0)
    first_high = _first_edge(cum, n, p, "high", bound)
    upper = np.where(first_high < len(EDGES), EDGES[np.minimum(first_high, len(EDGES) - 1)], math.inf)
    return lower, upper


def quantile_bounds(counts: Mapping[int, int], p: float, alpha: float) -> tuple[float, float]:
    """(lower, upper) on one variant's p-quantile from its bin counts, valid at every look at once."""
    cum, n = cumulative(counts)
    lower, upper = bounds_batch(cum[None, :], np.array([float(n)]), p, alpha)
    return float(lower[0]), float(upper[0])


def ratio_bounds(ours: tuple[Any, Any], theirs: tuple[Any, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on q_ours / q_theirs from each one's bounds (floats, or arrays over runs); both hold
    together by the union bound. An unknown end (a lower 0, an upper infinite) leaves the ratio open."""
    (lo, hi), (their_lo, their_hi) = (np.asarray(ours[0]), np.asarray(ours[1])), theirs
    with np.errstate(divide="ignore", invalid="ignore"):
        lower = np.where(np.asarray(their_hi) > 0, lo / their_hi, 0.0)
        upper = np.where(np.asarray(their_lo) > 0, hi / their_lo, math.inf)
    return lower, upper
