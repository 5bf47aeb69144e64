"""Error-rate tests: E1 + E2 against an absolute threshold, R1 against the baseline (research §4, §5)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.rollout.sequential._state import Detector, MixedEvidence, State, look_counts, require

GRID_SIZE = 10  # E1/E2 alternatives (research §4.3: the grid's shape matters little, K ~ 10)
RATIO_GRID_SIZE = 12  # psi alternatives of the conditional tests (research §5.1)
RATIO_GRID_SPAN = (1.25, 100.0)  # ... as multiples of psi0

# --- E1 + E2: errors against an absolute threshold (research §4) ---------------------------------


def threshold_alternatives(p0: float) -> tuple[float, ...]:
    """GRID_SIZE error rates log-spaced in [1.5 p0, 0.5] (research §4.3).

    For p0 >= 1/3 that interval is empty; the grid is then log-spaced in [p0 + (1-p0)/20, p0 + 3(1-p0)/4],
    inside (p0, 1) and below certainty, its low end close enough to p0 that a rate a few points above it
    is seen (a judge's loss share of 0.6 against `max_loss` 0.55: bench/quality_rules.py).
    """
    require(0.0 < p0 < 1.0, "p0", f"must be in (0, 1), got {p0}")
    low, high = (1.5 * p0, 0.5) if p0 < 1 / 3 else (p0 + (1 - p0) / 20, p0 + 3 * (1 - p0) / 4)
    return tuple(np.geomspace(low, high, GRID_SIZE).tolist())


def threshold_increments(
    p0: float, alternatives: np.ndarray, requests: np.ndarray, events: np.ndarray
) -> np.ndarray:
    """Each look's log likelihood ratio per alternative: requests, events (...) -> (..., K)."""
    p1 = np.asarray(alternatives)
    healthy = np.log1p(-p1) - math.log1p(-p0)  # each request that did not fail
    return requests[..., None] * healthy + events[..., None] * (np.log(p1 / p0) - healthy)


def shiryaev_roberts_step(
    log_sr: np.ndarray, started: np.ndarray, carried: np.ndarray, inc: np.ndarray
) -> np.ndarray:
    """E2's recursion R = (R + 1) * LR over one look, in logs: log_sr, inc (..., K); started (R was
    set by an earlier look with data; before it R = 0, so the first sets R = LR), carried (this look
    has data; a look without any is no SR step) (...)."""
    sr = np.where(started[..., None], np.logaddexp(log_sr, 0.0), 0.0) + inc
    return np.where(carried[..., None], sr, log_sr)


def shiryaev_roberts_looks(
    log_sr: np.ndarray, started: np.ndarray, carried: np.ndarray, inc: np.ndarray
) -> np.ndarray:
    """`shiryaev_roberts_step` over many looks at once: log_sr (..., K) and started (...) before them;
    carried (..., L) and inc (..., L, K) per look. Returns log R after each look (..., L, K), -inf until
    the first look with data.

    Unrolled, R after look n is R0 * exp(S_n) + sum over looks k <= n with data of exp(S_n - S_(k-1)),
    S the running sum of the increments: a cumulative log-sum-exp, one vector step per look over every
    run and alternative at once. The steps run on contiguous per-look slices: numpy's
    `logaddexp.accumulate` along this axis computes the same values about 3x slower.
    """
    total = inc.cumsum(axis=-2)
    terms = np.where(carried[..., None], inc - total, -np.inf)
    scan = np.moveaxis(terms, -2, 0).copy()  # (L, ..., K), each look contiguous
    if not len(scan):
        return total
    np.logaddexp(np.where(started[..., None], log_sr, -np.inf), scan[0], out=scan[0])
    for look in range(1, len(scan)):
        np.logaddexp(scan[look - 1], scan[look], out=scan[look])
    return total + np.moveaxis(scan, 0, -2)


def threshold_look(
    p0: float,
    alternatives: np.ndarray,
    log_lr: np.ndarray,
    log_sr: np.ndarray,
    started: np.ndarray,
    requests: np.ndarray,
    events: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """One look for many runs: log_lr, log_sr (..., K); started, requests, events (...).

    E1 adds the look's log likelihood ratio; E2 is the Shiryaev-Roberts recursion R = (R + 1) * LR, which
    starts R at 0, so a run's first look with data sets R = LR (`started` False). Looks without requests
    leave both unchanged: they are not SR steps.
    """
    inc = threshold_increments(p0, alternatives, requests, events)
    return log_lr + inc, shiryaev_roberts_step(log_sr, started, requests > 0, inc)


@dataclass(frozen=True)
class ThresholdTest(MixedEvidence, Detector, State):
    """H0: every request's error probability, given the past, is at most p0.

    E1 (`log_evalue`) is the rollout-cumulative mixture of SPRTs over `alternatives` (valid for the
    composite null because each factor's mean increases with the true rate and is 1 at p0). E2
    (`log_detector`) is the Shiryaev-Roberts e-detector on the same grid: it forgets healthy history, so a
    late regression is caught quickly; with threshold log A its false alarms within H looks are <= H/A.
    `log_sr` holds log R per alternative and means nothing before the first look with data (steps == 0).
    """

    p0: float
    alternatives: tuple[float, ...]
    log_lr: tuple[float, ...]
    log_sr: tuple[float, ...]
    requests: int
    events: int
    steps: int

    @classmethod
    def new(cls, p0: float) -> ThresholdTest:
        alternatives = threshold_alternatives(p0)
        zeros = (0.0,) * len(alternatives)
        return cls(p0, alternatives, zeros, zeros, 0, 0, 0)

    def update(self, requests: int, events: int) -> ThresholdTest:
        n, x = look_counts(requests, events)
        if n == 0:
            return self
        log_lr, log_sr = threshold_look(
            self.p0,
            np.asarray(self.alternatives),
            np.asarray(self.log_lr),
            np.asarray(self.log_sr),
            np.asarray(self.steps > 0),
            np.asarray(n),
            np.asarray(x),
        )
        return ThresholdTest(
            self.p0,
            self.alternatives,
            tuple(log_lr.tolist()),
            tuple(log_sr.tolist()),
            self.requests + n,
            self.events + x,
            self.steps + 1,
        )

    def _check(self) -> None:
        name = type(self).__name__
        require(0.0 < self.p0 < 1.0, f"{name}.p0", "must be in (0, 1)")
        require(
            len(self.alternatives) > 0 and all(self.p0 < p < 1.0 for p in self.alternatives),
            f"{name}.alternatives",
            "must be non-empty and inside (p0, 1)",
        )
        for field in ("log_lr", "log_sr"):
            require(len(getattr(self, field)) == len(self.alternatives), f"{name}.{field}", "length")
        require(self.events <= self.requests, f"{name}.events", "more events than requests")
        require(self.steps <= self.requests, f"{name}.steps", "more steps than requests")


# --- R1: candidate errors relative to the baseline's (research §5.1) -----------------------------


def ratio_alternatives(psi0: float) -> tuple[float, ...]:
    """RATIO_GRID_SIZE ratios log-spaced in [1.25 psi0, 100 psi0]."""
    require(psi0 > 0 and math.isfinite(psi0), "psi0", f"must be positive, got {psi0}")
    low, high = RATIO_GRID_SPAN
    return tuple(np.geomspace(low * psi0, high * psi0, RATIO_GRID_SIZE).tolist())


def stratified_log_factor(
    psi: np.ndarray, psi0: float, share: np.ndarray, cand_events: np.ndarray, base_events: np.ndarray
) -> np.ndarray:
    """Sum over strata of log Bin(s, theta(psi)) / Bin(s, theta(psi0)) at the candidate's x_c of s = x_c + x_b.

    theta(psi) = psi r / (psi r + 1 - r) is the candidate's expected share of the events when its rate is
    psi times the baseline's and it got a share r of the requests (Lindon-Malek). share (..., S); events
    (..., S, P) for P event definitions (edge pairs); returns (..., P, K) for the K alternatives psi.
    A stratum with no events contributes nothing; the sum over strata is a matrix product.
    """
    psi = np.asarray(psi)
    per_share = np.log1p(np.multiply.outer(share, psi - 1)) - np.log1p((psi0 - 1) * share)[..., None]
    total = np.swapaxes(cand_events + base_events, -1, -2)
    return cand_events.sum(axis=-2)[..., None] * np.log(psi / psi0) - total @ per_share


def request_shares(cand_requests: np.ndarray, base_requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidate's share of each stratum's requests (0 where one side had none), and where both had some."""
    compared = (cand_requests > 0) & (base_requests > 0)
    return np.where(compared, cand_requests, 0) / np.where(
        compared, cand_requests + base_requests, 1
    ), compared


def ratio_look(
    psi0: float,
    alternatives: np.ndarray,
    log_lr: np.ndarray,
    cand_requests: np.ndarray,
    cand_events: np.ndarray,
    base_requests: np.ndarray,
    base_events: np.ndarray,
) -> np.ndarray:
    """One look for many runs: log_lr (..., K); the counts (..., S) per stratum. Returns the new log_lr."""
    share, compared = request_shares(cand_requests, base_requests)
    cand, base = (np.where(compared, x, 0)[..., None] for x in (cand_events, base_events))
    return log_lr + stratified_log_factor(alternatives, psi0, share, cand, base)[..., 0, :]


@dataclass(frozen=True)
class RatioTest(MixedEvidence, Detector, State):
    """H0: the candidate's error rate is at most psi0 times the baseline's, in every stratum and look.

    Conditional on a (stratum, look)'s error total, the candidate's count is binomial with share
    theta(psi) (rare-event model); each (stratum, look) uses its realised request share, so a shared
    incident or a new traffic split cancels out (research §5.1, §5.3). Exact and conservative for psi0 = 1
    at any rates (hypergeometric, dominated in convex order by the binomial); for psi0 > 1 exact in the
    rare-event limit, which is what errors are. Strata where one side had no requests are skipped, and
    the counts below are of the compared strata only.

    `log_detector` is the Shiryaev-Roberts e-detector on the same per-look factors (one step per look
    that compared anything), so a regression that begins after hours of healthy traffic is told apart
    without first undoing their evidence; its false alarms within H looks are at most H/A at threshold
    A. `log_sr` empty: a state saved before it (its first step starts it).
    """

    psi0: float
    alternatives: tuple[float, ...]
    log_lr: tuple[float, ...]
    candidate_requests: int
    candidate_events: int
    baseline_requests: int
    baseline_events: int
    log_sr: tuple[float, ...] = ()
    steps: int = 0

    @classmethod
    def new(cls, psi0: float = 2.0) -> RatioTest:
        alternatives = ratio_alternatives(psi0)
        zeros = (0.0,) * len(alternatives)
        return cls(psi0, alternatives, zeros, 0, 0, 0, 0, zeros, 0)

    def update(self, strata: Sequence[tuple[int, int, int, int]]) -> RatioTest:
        rows = []
        for i, stratum in enumerate(strata):
            require(
                len(stratum) == 4,
                f"strata[{i}]",
                "expected (cand_requests, cand_events, base_requests, base_events)",
            )
            rows.append(
                (
                    *look_counts(*stratum[:2], f"strata[{i}].candidate_"),
                    *look_counts(*stratum[2:], f"strata[{i}].baseline_"),
                )
            )
        counts = np.array([row for row in rows if row[0] > 0 and row[2] > 0], dtype=np.int64).reshape(-1, 4)
        if not len(counts):
            return self
        before = np.asarray(self.log_lr)
        log_lr = ratio_look(self.psi0, np.asarray(self.alternatives), before, *counts.T)
        started = np.asarray(self.steps > 0)
        log_sr = shiryaev_roberts_step(
            np.asarray(self.log_sr or (0.0,) * len(self.log_lr)), started, np.asarray(True), log_lr - before
        )
        nc, xc, nb, xb = (int(v) for v in counts.sum(axis=0))
        return RatioTest(
            self.psi0,
            self.alternatives,
            tuple(log_lr.tolist()),
            self.candidate_requests + nc,
            self.candidate_events + xc,
            self.baseline_requests + nb,
            self.baseline_events + xb,
            tuple(log_sr.tolist()),
            self.steps + 1,
        )

    def _check(self) -> None:
        name = type(self).__name__
        require(self.psi0 > 0, f"{name}.psi0", "must be positive")
        require(
            len(self.alternatives) > 0 and all(p > self.psi0 for p in self.alternatives),
            f"{name}.alternatives",
            "must be non-empty and above psi0",
        )
        require(len(self.log_lr) == len(self.alternatives), f"{name}.log_lr", "length")
        require(len(self.log_sr) in (0, len(self.alternatives)), f"{name}.log_sr", "length")
        for side in ("candidate", "baseline"):
            ok = getattr(self, f"{side}_events") <= getattr(self, f"{side}_requests")
            require(ok, f"{name}.{side}_events", "more events than requests")
