"""Did the gateway send the traffic where the configuration said? Counted per flip period.

Decision (issue 9): when the weights flip during a run, each stretch between two flips is compared with
the weights that were live in it, rather than the whole run with a time-weighted expectation. A pooled
comparison lets two wrong periods cancel (80/20 served as 20/80 and then 20/80 as 80/20 pools to the
right total), and it cannot say which flip went wrong; per period it can, and a period whose weights
are 0 or 100 admits no stray request at all.

How periods are known: the configured routing is polled from the gateway's admin API. A change seen by
the poll sent at `sent` and answered at `received` happened somewhere after the previous poll was sent,
so requests sent from the previous poll's send time (less `guard` seconds) to `received` (plus
`guard`) are left out: they may have met either split. Requests are counted in bins of a tenth of a
second of their send time; a bin is folded into its period's counts once a later poll has confirmed
that period, so the master holds only a few seconds of bins and memory stays bounded on a 72-hour soak.

Requests are counted when they finish, so a bin is also held while a request sent before its end is
still running. When the run ends, Locust stops its users mid-request and those requests are never
counted; the ones still running are mostly on the slower variant (CI saw a last period of 15 of 15
requests on the faster one, after a flip to 50/50). So every request sent from the first one still
running at the end is left out too: the bins before it are complete, the ones after are not.

Each (period, client type, variant) is a test: the observed share's exact two-sided Clopper-Pearson
interval must contain the configured share. With many periods, a 95 % interval per test would fail
a correct run by chance (12 periods: about 46 %), so the family-wise `alpha` is split evenly over the
tests (Bonferroni): the whole run fails by chance with probability at most `alpha`.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scipy.stats import beta

from loadtests.config import NO_HEADER

Routing = dict[
    str, Any
]  # the admin API's `routing`: {"header", "rules": [{value, variant | weights}], "weights"}
Bin = tuple[int, str, str]  # (tenth of a second of send time, client type, variant)
BINS_PER_SECOND = 10


@dataclass(frozen=True)
class RateBounds:
    lower: float
    upper: float


def exact_bounds(events: int, trials: int, confidence: float = 0.95) -> RateBounds:
    """One-sided Clopper-Pearson bounds on a binomial rate; each holds with `confidence`, even for a
    handful of requests (a period may hold few)."""
    if trials <= 0:
        return RateBounds(0.0, 1.0)
    if not 0 <= events <= trials:
        raise ValueError(f"{events} events in {trials} trials")
    alpha = 1 - confidence
    lower = 0.0 if events == 0 else float(beta.ppf(alpha, events, trials - events + 1))
    upper = 1.0 if events == trials else float(beta.ppf(confidence, events + 1, trials - events))
    return RateBounds(lower, upper)


def configured_shares(routing: Routing, client_type: str) -> dict[str, float]:
    """The shares Envoy gives `client_type` under `routing`: its exact-match rule, else the default split."""
    rules = {rule["value"]: rule for rule in routing.get("rules", [])}
    rule = rules.get(client_type) if client_type != NO_HEADER else None
    if rule is None:
        weights = routing["weights"]
    elif rule.get("variant"):
        weights = {rule["variant"]: 100}
    else:
        weights = rule["weights"]
    total = sum(weights.values())
    return {variant: weight / total for variant, weight in weights.items()} if total > 0 else {}


@dataclass
class Tally:
    """What one Locust process saw, drained into reports (a worker sends them to the master)."""

    bins: Counter[Bin] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)  # variant -> requests
    failures: Counter[str] = field(default_factory=Counter)  # variant -> failed requests
    running: Counter[float] = field(default_factory=Counter)  # send time -> requests sent then, not finished

    def start(self, sent: float) -> None:
        """A request sent at `sent` is running: no bin from its send time on is complete until it ends."""
        self.running[sent] += 1

    def record(self, sent: float, client_type: str, variant: str, failed: bool) -> None:
        self.bins[(int(sent * BINS_PER_SECOND), client_type, variant)] += 1
        self.requests[variant] += 1
        self.failures[variant] += int(failed)
        self.abandon(sent)

    def abandon(self, sent: float) -> None:
        """The request sent at `sent` is no longer running: `record` counted it, or the user code
        raised and there is no answer to count."""
        self.running[sent] -= 1
        if self.running[sent] <= 0:
            del self.running[sent]

    def drain(self) -> dict[str, Any]:
        """A JSON-able report of everything since the last drain; empties the tally (but not `running`,
        which is the state now, not a change since the last report)."""
        report = {
            "bins": [[*key, count] for key, count in self.bins.items()],
            "requests": dict(self.requests),
            "failures": dict(self.failures),
            "oldest_running": min(self.running, default=None),
        }
        self.bins, self.requests, self.failures = Counter(), Counter(), Counter()
        return report


def report_bins(report: dict[str, Any]) -> Counter[Bin]:
    """The bins of a drained report (after its trip through JSON to the master)."""
    return Counter(
        {(int(tick), client_type, variant): count for tick, client_type, variant, count in report["bins"]}
    )


@dataclass(frozen=True)
class ShareCheck:
    period: int
    start: float
    end: float | None
    client_type: str
    variant: str
    expected: float
    observed: int
    requests: int
    lower: float
    upper: float

    @property
    def ok(self) -> bool:
        return self.lower <= self.expected <= self.upper

    @property
    def share(self) -> float:
        return self.observed / self.requests


@dataclass(frozen=True)
class SplitResult:
    checks: list[ShareCheck]
    periods: int
    excluded: int  # requests left out: near a flip, or while the configuration was unknown
    counted: int
    cut_off: int  # requests left out as sent after the first request still running at the end
    alpha: float

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


class SplitTracker:
    """Weight periods from polls, request bins assigned to them once settled."""

    def __init__(self, guard: float = 0.5, alpha: float = 0.01) -> None:
        self.guard = guard
        self.alpha = alpha
        self._last_sent = -math.inf
        self._band_lo: list[float] = []  # per change: requests sent in [lo, hi] are left out
        self._band_hi: list[float] = []
        self._routing: list[Routing | None] = []
        self._counts: list[Counter[tuple[str, str]]] = []  # per change: (client type, variant) -> requests
        self._pending: Counter[Bin] = Counter()
        self._oldest_running: dict[str, float] = {}  # per reporting process
        self.excluded = 0

    def observe(self, sent: float, received: float, routing: Routing | None) -> None:
        """A poll sent at `sent`, answered at `received`; `routing` None when it could not be read."""
        if not self._routing or routing != self._routing[-1]:
            self._band_lo.append(self._last_sent - self.guard)
            self._band_hi.append(received + self.guard)
            self._routing.append(routing)
            self._counts.append(Counter())
        self._last_sent = sent
        self._settle(sent)

    def add(self, bins: Counter[Bin], oldest_running: float | None = None, source: str = "") -> None:
        """Finished requests' bins, and the send time of the oldest request `source` still runs."""
        self._pending.update(bins)
        if oldest_running is None:
            self._oldest_running.pop(source, None)
        else:
            self._oldest_running[source] = oldest_running
        self._settle(self._last_sent)

    def _complete_until(self) -> float:
        return min(self._oldest_running.values(), default=math.inf)

    def _settle(self, confirmed_until: float) -> None:
        """Assign bins that end `guard` before the last poll's send time (no later change can reach them)
        and before the oldest running request (every request sent in them has been counted)."""
        complete = self._complete_until()
        ready = [
            key
            for key in self._pending
            if (end := (key[0] + 1) / BINS_PER_SECOND) + self.guard <= confirmed_until and end <= complete
        ]
        for key in ready:
            self._assign(key, self._pending.pop(key))

    def _assign(self, key: Bin, count: int) -> None:
        start, client_type, variant = key[0] / BINS_PER_SECOND, key[1], key[2]
        end = start + 1 / BINS_PER_SECOND
        period = bisect.bisect_right(self._band_lo, start) - 1
        in_band = any(
            end > self._band_lo[i] and start < self._band_hi[i]
            for i in (period, period + 1)
            if 0 <= i < len(self._band_lo)
        )
        if period < 0 or in_band or self._routing[period] is None:
            self.excluded += count
        else:
            self._counts[period][(client_type, variant)] += count

    def result(self) -> SplitResult:
        """Call after the last request and a last poll: no change can come after it, so every pending
        bin is settled against the periods known now; those that never completed are left out."""
        self._settle(math.inf)
        cut_off = sum(self._pending.values())
        cells = []
        for period, counts in enumerate(self._counts):
            routing = self._routing[period]
            if routing is None:
                continue  # nothing was counted in it (`_assign`): its routing could not be read
            totals: Counter[str] = Counter()
            for (client_type, _), count in counts.items():
                totals[client_type] += count
            for client_type, requests in sorted(totals.items()):
                shares = configured_shares(routing, client_type)
                seen = {v for (c, v) in counts if c == client_type}
                for variant in sorted(set(shares) | seen):
                    cells.append((period, client_type, variant, shares.get(variant, 0.0), requests))
        confidence = 1 - self.alpha / (2 * max(1, len(cells)))  # each side of each two-sided interval
        checks = []
        for period, client_type, variant, share, requests in cells:
            observed = self._counts[period][(client_type, variant)]
            bounds = exact_bounds(observed, requests, confidence)
            end = self._band_lo[period + 1] if period + 1 < len(self._band_lo) else None
            start = self._band_hi[period]
            checks.append(
                ShareCheck(
                    period,
                    start,
                    end,
                    client_type,
                    variant,
                    share,
                    observed,
                    requests,
                    bounds.lower,
                    bounds.upper,
                )
            )
        counted = sum(sum(c.values()) for c in self._counts)
        return SplitResult(checks, len(self._counts), self.excluded, counted, cut_off, self.alpha)
