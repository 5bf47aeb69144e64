"""The shipped rollback tests, run over many simulated runs at once with the kernels they ship with.

gateway/rollout/sequential's states call `threshold_look`, `ratio_look` and `shift_look` with one run;
here they are called with every run of a scenario at once (leading axis = runs), so what is simulated is
what the controller computes. The levels come from `plan_for` on a spec like the seed's, so the budget
split is the shipped one too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from gateway.rollout.checks.error_ratio import ERROR_RATIO, RatioSettings
from gateway.rollout.checks.errors import Blame, blame
from gateway.rollout.checks.latency import TTFT_VS_BASELINE, LatencySettings
from gateway.rollout.checks.slo import TTFT_P95, SloSettings
from gateway.rollout.plan import Plan, plan_for
from gateway.rollout.sequential import (
    RatioTest,
    ShiftTest,
    ThresholdTest,
    edge_pairs,
    kl_bernoulli,
    mixture,
    ratio_look,
    shift_look,
    shiryaev_roberts_looks,
    shiryaev_roberts_step,
    threshold_increments,
    threshold_look,
)
from gateway.spec.model import validate_spec

LOOK_SECONDS = 5.0


def max_error_ratio(plan: Plan) -> float | None:
    """The error ratio test's bound where the plan runs it."""
    found = plan.settings.get(ERROR_RATIO)
    return found.max_ratio if isinstance(found, RatioSettings) else None


def max_latency_ratio(plan: Plan) -> float:
    """The latency comparisons' bound (the seed spec sets one)."""
    found = plan.settings.get(TTFT_VS_BASELINE)
    if not isinstance(found, LatencySettings):
        raise ValueError("the plan has no max_latency_ratio")
    return found.max_ratio


def max_ttft_p95(plan: Plan) -> float:
    """The TTFT SLO (the seed spec sets one)."""
    found = plan.settings.get(TTFT_P95)
    if not isinstance(found, SloSettings):
        raise ValueError("the plan has no max_ttft_p95")
    return found.max_ttft_p95


def seed_spec(**changes: Any) -> dict[str, Any]:
    """The seed's rollout spec (the spec's defaults, one randomised default split, a look every
    LOOK_SECONDS), with `changes`' top-level fields over it (`analysis` merged field by field)."""
    analysis = {"interval": f"{LOOK_SECONDS:g}s", **changes.pop("analysis", {})}
    return {
        "name": "zero-layer",
        "variants": {
            "baseline": {"endpoints": ["127.0.0.1:8001"]},
            "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
        },
        "routing": {"weights": {"baseline": 95, "zero-layer": 5}},
        "retries": {"fallback": "baseline"},
        "analysis": analysis,
        **changes,
    }


def seed_plan(max_error_rate: float = 0.003) -> Plan:
    """The plan of the seed's rollout spec."""
    return plan_for(validate_spec(seed_spec(analysis={"max_error_rate": max_error_rate})))


@dataclass
class ThresholdRuns:
    """E1 and E2 on one variant's counts: state per run."""

    plan: Plan
    runs: int

    def __post_init__(self) -> None:
        self.alternatives = np.asarray(ThresholdTest.new(self.plan.max_error_rate).alternatives)
        self.log_lr = np.zeros((self.runs, len(self.alternatives)))
        self.log_sr = np.zeros((self.runs, len(self.alternatives)))
        self.started = np.zeros(self.runs, dtype=bool)

    def looks(self, n: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Add a run of looks' counts (runs, looks); returns which runs' E1 or E2 has fired at each look.

        E1 adds each look's log likelihood ratio, so a batch of looks is a cumulative sum of the
        kernel's increments; E2's recursion runs over the batch in closed form
        (`shiryaev_roberts_looks`, tested equal to the controller's look-by-look step)."""
        plan = self.plan
        carried = n > 0
        if not carried.any():  # no step for any run: each stays as it is over these looks
            return _each_look(self.fired(), n.shape[1])
        inc = threshold_increments(plan.max_error_rate, self.alternatives, n, x)
        log_lr = self.log_lr[:, None, :] + inc.cumsum(axis=1)
        log_sr = shiryaev_roberts_looks(self.log_sr, self.started, carried, inc)
        started = self.started[:, None] | np.logical_or.accumulate(carried, axis=1)
        self.log_sr = np.where(started[:, -1, None], log_sr[:, -1], self.log_sr)
        self.log_lr, self.started = log_lr[:, -1], started[:, -1]
        return _reaches(log_lr, plan.log_bound) | (started & _reaches(log_sr, plan.log_detector_bound))

    def fired(self) -> np.ndarray:
        """Which runs' E1 or E2 has fired as they stand."""
        detected = self.started & _reaches(self.log_sr, self.plan.log_detector_bound)
        return _reaches(self.log_lr, self.plan.log_bound) | detected


@dataclass
class RatioRuns:
    """R1 at `psi0` (the candidate's errors against the baseline's), with its change detector where
    `detector`: state per run."""

    plan: Plan
    runs: int
    psi0: float
    detector: bool = False

    def __post_init__(self) -> None:
        self.ratios = np.asarray(RatioTest.new(self.psi0).alternatives)
        self.log_lr = np.zeros((self.runs, len(self.ratios)))
        self.log_sr = np.zeros((self.runs, len(self.ratios)))
        self.started = np.zeros(self.runs, dtype=bool)

    def looks(
        self, cand_n: np.ndarray, cand_x: np.ndarray, base_n: np.ndarray, base_x: np.ndarray
    ) -> np.ndarray:
        """Add a run of looks' counts (runs, looks); returns which runs' R1 (or its detector) has fired
        at each look."""
        # R1's factor is exactly 1 (log 0) at a look without errors or without one side's requests,
        # so the kernel runs on the other looks only
        compared = (cand_n > 0) & (base_n > 0)
        if not compared.any():  # a factor of 1 and no SR step for every run: each stays as it is
            return _each_look(self.fired(), cand_n.shape[1])
        counted = (cand_x + base_x > 0) & compared
        steps = np.zeros((*cand_n.shape, len(self.ratios)))
        steps[counted] = ratio_look(
            self.psi0, self.ratios, np.zeros((int(counted.sum()), len(self.ratios))),
            *(counts[counted][:, None] for counts in (cand_n, cand_x, base_n, base_x)),
        )  # fmt: skip
        log_lr = self.log_lr[:, None, :] + steps.cumsum(axis=1)
        self.log_lr = log_lr[:, -1]
        fired = _reaches(log_lr, self.plan.log_bound)
        if not self.detector:
            return fired
        # a look that compared is one SR step (a factor of 1 where it had no errors)
        log_sr = shiryaev_roberts_looks(self.log_sr, self.started, compared, steps)
        started = self.started[:, None] | np.logical_or.accumulate(compared, axis=1)
        self.log_sr = np.where(started[:, -1, None], log_sr[:, -1], self.log_sr)
        self.started = started[:, -1]
        return fired | (started & _reaches(log_sr, self.plan.log_detector_bound))

    def fired(self) -> np.ndarray:
        """Which runs' R1 (or its detector) has fired as they stand."""
        fired = _reaches(self.log_lr, self.plan.log_bound)
        if not self.detector:
            return fired
        return fired | (self.started & _reaches(self.log_sr, self.plan.log_detector_bound))


class Judged(NamedTuple):
    """The error checks per run and look (runs, looks)."""

    failing: np.ndarray  # the candidate's threshold test (E1 or E2) has fired
    baseline_failing: np.ndarray  # ... the baseline's, on its own counts
    whose: np.ndarray  # `Blame`: whose a failing test is
    ratio: np.ndarray  # error_ratio has fired


@dataclass
class ErrorTests:
    """The error checks as the controller runs them: E1 and E2 on the candidate, whose a failure is
    (gateway/rollout/checks/errors.py `blame`: the comparison at equal exposure, R1 at psi0 = 1 with its
    change detector, and E1 and E2 on the baseline's own counts), and R1 against the baseline at max_error_ratio: state per run."""

    plan: Plan
    runs: int

    def __post_init__(self) -> None:
        self.candidate = ThresholdRuns(self.plan, self.runs)
        self.baseline = ThresholdRuns(self.plan, self.runs)
        self.comparison = RatioRuns(self.plan, self.runs, 1.0, detector=True)
        ratio_bound = max_error_ratio(self.plan)
        self.ratio = None if ratio_bound is None else RatioRuns(self.plan, self.runs, ratio_bound)
        self.alone = np.zeros(self.runs, dtype=bool)

    def after_incident(self, runs: np.ndarray) -> None:
        """A held shared incident's new tests for `runs` (a mask), as gateway/rollout/evidence.py
        `after_incident`: the threshold tests on each variant's own traffic start anew, the comparisons
        go on."""
        for tests in (self.candidate, self.baseline):
            tests.log_lr[runs], tests.log_sr[runs], tests.started[runs] = 0.0, 0.0, False

    def judged(
        self, cand_n: np.ndarray, cand_x: np.ndarray, base_n: np.ndarray, base_x: np.ndarray
    ) -> Judged:
        """Add a run of looks' counts (runs, looks); returns what each run's tests say at each look."""
        failing = self.candidate.looks(cand_n, cand_x)
        baseline_failing = self.baseline.looks(base_n, base_x)
        worse = self.comparison.looks(cand_n, cand_x, base_n, base_x)
        # the last look with candidate traffic: had the baseline none? (carried over looks without any)
        last = np.maximum.accumulate(np.where(cand_n > 0, np.arange(cand_n.shape[1]), -1), axis=1)
        alone = np.where(
            last >= 0, np.take_along_axis(base_n == 0, np.maximum(last, 0), axis=1), self.alone[:, None]
        )
        self.alone = alone[:, -1]
        ratio = (
            np.zeros_like(failing) if self.ratio is None else self.ratio.looks(cand_n, cand_x, base_n, base_x)
        )
        return Judged(failing, baseline_failing, blame(worse, alone, baseline_failing), ratio)

    def looks(
        self, cand_n: np.ndarray, cand_x: np.ndarray, base_n: np.ndarray, base_x: np.ndarray
    ) -> np.ndarray:
        """Add a run of looks' counts (runs, looks); returns which runs roll back at each look
        (`on_shared_incident: rollback`, the default: a failure told apart rolls back, shared or not)."""
        found = self.judged(cand_n, cand_x, base_n, base_x)
        return (found.failing & (found.whose != Blame.UNTOLD)) | found.ratio


@dataclass
class ShiftTests:
    """A shift test against the baseline (L2) with its change detector, on any latency histogram's
    buckets: TTFT here, time per output token in bench/itl_units.py."""

    plan: Plan
    runs: int
    edges: np.ndarray

    def __post_init__(self) -> None:
        test = ShiftTest.new(self.edges, max_latency_ratio(self.plan) - 1)
        self.pairs = edge_pairs(test.edges, test.max_slowdown)
        self.ratios = np.asarray(test.alternatives)
        pairs = len(self.pairs[0])
        self.log_lr = np.zeros((self.runs, pairs, len(self.ratios)))
        self.log_wealth = np.zeros(self.runs)
        self.log_sr = np.zeros((self.runs, pairs, len(self.ratios)))
        self.started = np.zeros(self.runs, dtype=bool)
        self.base_exceedances = np.zeros((self.runs, pairs))
        self.base_requests = np.zeros(self.runs)

    def look(self, cand: np.ndarray, base: np.ndarray) -> np.ndarray:
        """One look's cumulative bucket increments (runs, E+1); returns which runs' tests fire."""
        before = self.log_lr
        self.log_lr, self.log_wealth, self.base_exceedances, self.base_requests = shift_look(
            self.pairs, self.ratios, self.log_lr, self.log_wealth, self.base_exceedances, self.base_requests,
            cand[:, None, :], base[:, None, :],
        )  # fmt: skip
        compared = (cand[:, -1] > 0) & (base[:, -1] > 0)
        self.log_sr = shiryaev_roberts_step(
            self.log_sr, self.started[:, None], compared[:, None], self.log_lr - before
        )
        self.started |= compared
        runs = self.log_sr.reshape(self.runs, -1)
        changed = self.started & _reaches(runs, self.plan.log_detector_bound)
        return (self.log_wealth >= self.plan.log_bound) | changed


@dataclass
class LatencyTests:
    """L1 (the TTFT SLO as an exceedance test), and the TTFT shift test against the baseline with its
    change detector."""

    plan: Plan
    runs: int
    edges: np.ndarray

    def __post_init__(self) -> None:
        self.shift = ShiftTests(self.plan, self.runs, self.edges)
        self.slo_edge = int(np.searchsorted(self.edges, max_ttft_p95(self.plan)))
        self.slo = np.asarray(ThresholdTest.new(0.05).alternatives)
        self.slo_lr = np.zeros((self.runs, len(self.slo)))
        self.slo_sr = np.zeros((self.runs, len(self.slo)))

    def look(self, cand: np.ndarray, base: np.ndarray) -> np.ndarray:
        """One look's cumulative bucket increments (runs, E+1); returns which runs' tests fire."""
        shifted = self.shift.look(cand, base)
        total = cand[:, -1]
        slow = total - cand[:, self.slo_edge]
        started = np.ones(self.runs, dtype=bool)
        self.slo_lr, self.slo_sr = threshold_look(
            0.05, self.slo, self.slo_lr, self.slo_sr, started, total, slow
        )
        return shifted | _reaches(self.slo_lr, self.plan.log_bound)


def _each_look(fired: np.ndarray, looks: int) -> np.ndarray:
    """`fired` (runs,) at each of `looks` looks in which no test moved (runs, looks): the kernels' cost
    there is skipped (a whole stage at 100 % gives the baseline's tests no look with data)."""
    return np.repeat(fired[:, None], looks, axis=1)


def _reaches(log_values: np.ndarray, bound: float) -> np.ndarray:
    """Where the equal-weight mixture over the last axis reaches `bound`. The mixture never exceeds its
    largest component, so it is computed only where that component does (exact): a run (leading axis)
    none of whose values reaches the bound costs one max over them all, which is every healthy run."""
    reached = np.zeros(log_values.shape[:-1], dtype=bool)
    runs = np.flatnonzero(log_values.reshape(len(log_values), -1).max(axis=1) >= bound)
    if runs.size:
        candidates = log_values[runs]
        top = candidates.max(axis=-1)
        near = top >= bound
        hits = np.zeros(top.shape, dtype=bool)
        hits[near] = mixture(candidates[near]) >= bound
        reached[runs] = hits
    return reached


def error_floor(
    plan: Plan, candidate_rps: float, baseline_rps: float, p: float, p_base: float, late: bool = False
) -> float:
    """Seconds the shipped budget allows a test to need at least, on average, to catch an error rate p:
    `_floor` over the best information rate among the shipped error tests (E1 against the threshold, R1
    against the baseline)."""
    rates = [candidate_rps * kl_bernoulli(p, plan.max_error_rate)] if p > plan.max_error_rate else []
    ratio_bound = max_error_ratio(plan)
    if ratio_bound is not None:
        rates.append(_ratio_information(candidate_rps * p, baseline_rps * p_base, candidate_rps, baseline_rps,
                                        ratio_bound))  # fmt: skip
    return _floor(plan, rates, late)


def latency_floor(
    plan: Plan,
    candidate_rps: float,
    baseline_rps: float,
    edges: np.ndarray,
    slower: Callable[[float], float],
    faster: Callable[[float], float],
    late: bool = False,
) -> float:
    """As `error_floor`, for TTFT: the SLO's exceedance test and each edge pair of the shift test.
    `slower(e)`, `faster(e)`: P(T > e) for the candidate and the baseline."""
    rates = []
    above = slower(max_ttft_p95(plan))
    if above > 0.05:
        rates.append(candidate_rps * kl_bernoulli(above, 0.05))
    first, second = edge_pairs(edges, max_latency_ratio(plan) - 1)
    for i, j in zip(first, second, strict=True):
        rates.append(_ratio_information(candidate_rps * slower(edges[j]), baseline_rps * faster(edges[i]),
                                        candidate_rps, baseline_rps, 1.0))  # fmt: skip
    return _floor(plan, rates, late)


def _floor(plan: Plan, rates: list[float], late: bool) -> float:
    """The evidence a decision needs over the best information rate (nats per second).

    From the start, log(1/alpha): no level-alpha test rejects sooner on average (Wald). A regression that
    begins late is the change detectors' to catch, and they need log A, their threshold: no procedure
    whose false alarms come at least A looks apart on average detects a change sooner than log A over
    the information rate, in the worst case over when it begins (Lorden 1971; Pollak 1985)."""
    best = max(rates, default=0.0)
    bound = plan.log_detector_bound if late else plan.log_bound
    return bound / best if best > 0 else math.inf


def _ratio_information(
    cand_events: float, base_events: float, cand_rps: float, base_rps: float, psi0: float
) -> float:
    """Nats per second the conditional share-of-events test gains: events/s times KL(share || null share)."""
    events = cand_events + base_events
    if events <= 0:
        return 0.0
    share = cand_events / events
    r = cand_rps / (cand_rps + base_rps)
    null = psi0 * r / (psi0 * r + 1 - r)
    return events * kl_bernoulli(share, null) if share > null else 0.0
