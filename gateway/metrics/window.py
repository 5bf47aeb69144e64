"""Counters and histogram buckets over a sliding window, from repeated scrapes (pure; clock injected).

The `direct` provider scrapes cumulative counters, and the rollout asks "how many over the last 60 s".
This answers it as Prometheus' `increase()` and `histogram_quantile()` would, without a Prometheus
server (shared/DESIGN.md, "Local stack"), with two differences kept on purpose:
- no extrapolation to the window's edges: a delta is taken over the samples inside the window, so
  counts stay whole (the binomial error-rate test wants counts of requests, not rates);
- a series first seen after an earlier scrape is counted from 0 at that scrape. Envoy and
  prometheus_client create a labelled series on first use (the first 503 creates its
  `envoy_response_code="503"` series); Prometheus would miss that first increase, which is exactly
  the failure a rollback is waiting for.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (sample name, labels sorted by name)
Matcher = Mapping[str, str | re.Pattern[str]]


def series_key(name: str, labels: Mapping[str, str]) -> SeriesKey:
    return name, tuple(sorted(labels.items()))


def matches(labels: Mapping[str, str], matcher: Matcher) -> bool:
    """PromQL label matching: a string must be equal (so "" matches an absent label), a pattern must
    match the whole value (like `=~`)."""
    for name, wanted in matcher.items():
        value = labels.get(name, "")
        if isinstance(wanted, str):
            if value != wanted:
                return False
        elif not wanted.fullmatch(value):
            return False
    return True


def counter_increase(values: Sequence[float]) -> float:
    """The increase over consecutive samples of a counter. A value lower than the one before means
    the process restarted from zero: the new value is all increase since the restart."""
    total = 0.0
    for before, after in pairwise(values):
        total += after - before if after >= before else after
    return total


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' `histogram_quantile` over cumulative counts keyed by upper bound (`le`).

    Linear interpolation inside the bucket holding the rank (the lowest bucket starts at 0); a rank
    in the +Inf bucket answers the highest finite bound. None where there is nothing to estimate
    from: no +Inf bucket, fewer than two buckets, or no observations. `q` is in (0, 1].
    """
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} is not in (0, 1]")
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    counts, highest = [], 0.0
    for bound in bounds:  # deltas of separately reset buckets can dip: keep them cumulative
        highest = max(highest, buckets[bound])
        counts.append(highest)
    if counts[-1] == 0:
        return None
    rank = q * counts[-1]
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(bounds) - 1:
        return bounds[-2]
    upper = bounds[index]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (bounds[index - 1], counts[index - 1]) if index else (0.0, 0.0)
    return lower + (upper - lower) * (rank - below) / (counts[index] - below)


class WindowStore:
    """Timestamped samples per series, kept for `retention` seconds (the longest window asked for),
    so memory stays bounded however long the controller runs."""

    def __init__(self, clock: Callable[[], float], retention: float) -> None:
        self.clock = clock
        self.retention = retention
        self._samples: dict[SeriesKey, deque[tuple[float, float]]] = {}
        self._last_scrape: float | None = None

    def record(self, scrape: Mapping[SeriesKey, float]) -> None:
        """One scrape of every target, taken now."""
        now = self.clock()
        for key, value in scrape.items():
            samples = self._samples.get(key)
            if samples is None:
                samples = self._samples[key] = deque()
                if self._last_scrape is not None:
                    samples.append((self._last_scrape, 0.0))  # created since: it was 0 then
            samples.append((now, value))
        self._last_scrape = now
        self._prune(now - self.retention)

    def _prune(self, oldest: float) -> None:
        for key in list(self._samples):
            samples = self._samples[key]
            while samples and samples[0][0] < oldest:
                samples.popleft()
            if not samples:
                del self._samples[key]

    def sample_count(self) -> int:
        """Samples held, all series together (what bounded memory means here)."""
        return sum(len(samples) for samples in self._samples.values())

    def delta(self, key: SeriesKey, window: float) -> float:
        """The counter's increase over its samples from `window` seconds ago to now, edges included."""
        start = self.clock() - window
        return counter_increase([value for at, value in self._samples.get(key, ()) if at >= start])

    def increase(self, name: str, matcher: Matcher, window: float) -> float:
        """Sum of `delta` over the series named `name` whose labels match (PromQL `sum(increase(...))`)."""
        return sum(self.delta(key, window) for key in self._matching(name, matcher))

    def quantile(self, q: float, bucket_name: str, matcher: Matcher, window: float) -> float | None:
        """`histogram_quantile(q, sum by (le) (increase(<bucket_name>{matcher}[window])))`."""
        buckets: dict[float, float] = defaultdict(float)
        for key in self._matching(bucket_name, matcher):
            le = dict(key[1]).get("le")
            if le is not None:
                buckets[float(le)] += self.delta(key, window)
        return histogram_quantile(q, buckets)

    def _matching(self, name: str, matcher: Matcher) -> list[SeriesKey]:
        return [key for key in self._samples if key[0] == name and matches(dict(key[1]), matcher)]
