"""The rules the rollout controller used before its sequential tests, kept to be measured against them.

`previous`: what shipped until the sequential tests (gateway/rollout/stats.py before them), per look
over a sliding window: error rate above the threshold with 99 % confidence over the 60 s window, or
99.5 % over its last quarter (one-sided Clopper-Pearson bounds); latency failing when the candidate's
p99 over the window exceeds 1.5x the baseline's, or its TTFT p95 exceeds 2 s, each once the window
holds min_requests (100). `naive`: what Flagger and Argo Rollouts do with their defaults, the raw
ratios over the window (the error ratio above the threshold, the same latency ratios without a minimum).

Vectorised over runs and looks, so that hours of looks simulate in seconds. The Clopper-Pearson lower
bound exceeds p0 exactly when P(Bin(n, p0) >= x) < 1 - confidence, so a window fails when its errors
reach the fewest failing count for its size, tabulated once per size from scipy's binomial.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

MIN_REQUESTS = 100
LATENCY_RATIO = 1.5
TTFT_P95 = 2.0
WINDOW_CONFIDENCE = 0.99
RECENT_CONFIDENCE = 0.995

_TABLES: dict[tuple[float, float], np.ndarray] = {}


def fewest_failing(requests: np.ndarray, p0: float, confidence: float) -> np.ndarray:
    """Per window: the fewest errors among its `requests` whose exact lower bound exceeds p0."""
    table = _TABLES.get((p0, confidence), np.zeros(0, dtype=np.int64))
    needed = int(requests.max(initial=0)) + 1
    if len(table) < needed:
        sizes = np.arange(max(needed, 2 * len(table)))
        # smallest x with sf(x - 1) < 1 - confidence; isf answers the smallest k with sf(k) <= q
        x = binom.isf(1 - confidence, sizes, p0).astype(np.int64) + 1
        x = np.where(binom.sf(x - 1, sizes, p0) < 1 - confidence, x, x + 1)
        table = _TABLES[p0, confidence] = np.where(sizes == 0, 1, x)
    return table[requests]


def rolling(counts: np.ndarray, looks: int) -> np.ndarray:
    """Sums over the last `looks` looks (axis 1), the current one included."""
    total = counts.cumsum(axis=1)
    total[:, looks:] -= total[:, :-looks].copy()  # the copy: numpy would make one for the overlap anyway
    return total


def previous_errors(
    requests: np.ndarray, errors: np.ndarray, window: int, recent: int, p0: float
) -> np.ndarray:
    """(runs, looks) -> does the previous rule fail the candidate at each look? `window`, `recent` in looks."""
    n, x = rolling(requests, window), rolling(errors, window)
    rn, rx = rolling(requests, recent), rolling(errors, recent)
    return (x >= fewest_failing(n, p0, WINDOW_CONFIDENCE)) | (rx >= fewest_failing(rn, p0, RECENT_CONFIDENCE))


def naive_errors(requests: np.ndarray, errors: np.ndarray, window: int, p0: float) -> np.ndarray:
    n, x = rolling(requests, window), rolling(errors, window)
    return (n > 0) & (x > p0 * n)


def quantile(q: float, edges: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Prometheus' histogram_quantile over (..., E+1) cumulative bucket counts (the total last); NaN
    where nothing was observed, the highest finite edge where the rank lies in +Inf."""
    total = buckets[..., -1]
    rank = q * total
    index = np.minimum((buckets < rank[..., None]).sum(axis=-1), len(edges))
    upper = np.append(edges, edges[-1])[index]
    lower = np.where(index > 0, np.append(0.0, edges)[index], 0.0)
    padded = np.concatenate([np.zeros((*buckets.shape[:-1], 1)), buckets], axis=-1)
    below = np.take_along_axis(padded, index[..., None], axis=-1)[..., 0]
    inside = np.take_along_axis(buckets, index[..., None], axis=-1)[..., 0] - below
    value = lower + (upper - lower) * (rank - below) / np.where(inside > 0, inside, 1)
    value = np.where(index >= len(edges), edges[-1], value)
    return np.where(total > 0, value, np.nan)


def latency(
    cand: np.ndarray, base: np.ndarray, edges: np.ndarray, window: int, minimums: tuple[int, ...]
) -> list[np.ndarray]:
    """(runs, looks, E+1) bucket increments -> for each minimum, does the window's p99 ratio or TTFT p95
    fail once the window holds that many candidate requests? (The windows are summed once for all.)"""
    ours, theirs = rolling(cand, window), rolling(base, window)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = quantile(0.99, edges, ours) / quantile(0.99, edges, theirs)
        slow = quantile(0.95, edges, ours) > TTFT_P95
    failing = (ratio > LATENCY_RATIO) | slow
    return [(ours[..., -1] >= minimum) & failing for minimum in minimums]
