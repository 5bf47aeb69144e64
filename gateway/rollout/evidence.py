"""The rollout's evidence: every check's sequential tests, carried from look to look. Pure.

Each look adds one look's increments (gateway/rollout/increments.py) to the tests of every check the
plan runs (gateway/rollout/plan.py, gateway/rollout/checks/): each check keeps its own record, in
`tests` under its name. The few hundred numbers here live in the rollout state, so a restarted gateway
or a new leader continues the same tests instead of starting over (a state that was lost starts new
tests, which the controller logs). Tests are never reset when a stage changes: an e-process's
guarantee covers the whole rollout, for any look schedule and any weight schedule, and a restart per
stage would spend the budget again. They restart on `retry`, on a new candidate, or when the settings
that define them change (the plan's key). A held shared incident restarts only the tests that tell one,
those on each variant's own traffic (`after_incident`): the comparisons go on.

The current stage's candidate requests (and errors, and mean latencies, for the shadow gate) are
counted too: a stage ends only once it has seen enough to catch `min_detectable_error_rate`. An
evidence gate's own tests ride beside the checks' (gateway/rollout/not_worse.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gateway.rollout.checks.base import Plan
from gateway.rollout.checks.common import randomised
from gateway.rollout.checks.errors import ERROR_RATE, ErrorTests
from gateway.rollout.checks.latency import LatencyTests
from gateway.rollout.checks.slo import TTFT_P95
from gateway.rollout.checks.table import CHECKS, TestState
from gateway.rollout.increments import VariantLook
from gateway.rollout.not_worse import NotWorse, start_tests, with_look
from gateway.rollout.sequential import ThresholdTest


@dataclass(frozen=True)
class StageCounts:
    """The current stage's counts (reset when the stage changes; never used for a rollback)."""

    stage: str
    requests: int = 0
    errors: int = 0
    candidate_latency: tuple[float, float] = (0.0, 0.0)  # TTFT seconds and count, randomised strata
    baseline_latency: tuple[float, float] = (0.0, 0.0)

    def latency_ratio(self) -> float | None:
        """Mean TTFT, candidate over baseline, this stage (the shadow gate's descriptive ratio)."""
        (ours, n_ours), (theirs, n_theirs) = self.candidate_latency, self.baseline_latency
        if not n_ours or not n_theirs or not theirs:
            return None
        return (ours / n_ours) / (theirs / n_theirs)


@dataclass(frozen=True)
class Evidence:
    plan: str  # the key of the plan these tests run under
    started: float  # when they started
    stage: StageCounts
    tests: dict[str, TestState] = field(default_factory=dict)  # check (row) name -> its tests
    not_worse: NotWorse | None = None  # an evidence gate's tests (gateway/rollout/not_worse.py)


def start(plan: Plan, stage: str, now: float) -> Evidence:
    """New tests, at their starting values."""
    tests = {}
    for row in CHECKS:
        if row.name in plan.settings and (started := row.start(plan.settings[row.name])) is not None:
            tests[row.name] = started
    return Evidence(
        plan=plan.key, started=now, stage=StageCounts(stage), tests=tests, not_worse=start_tests(plan)
    )


def add_look(evidence: Evidence, plan: Plan, looks: Mapping[str, VariantLook], stage: str) -> Evidence:
    """`evidence` with one look's increments added (`looks`: per variant; `stage`: where the rollout
    stands now, whose counts the stage totals collect). A check the plan runs with no tests in
    `evidence` (a state saved before it kept any) starts them now."""
    ours, theirs = looks.get(plan.candidate, VariantLook()), looks.get(plan.baseline, VariantLook())
    tests = {}
    for row in CHECKS:
        if row.name not in plan.settings:
            continue
        settings = plan.settings[row.name]
        before = evidence.tests.get(row.name) or row.start(settings)
        if before is not None:
            tests[row.name] = row.add(before, settings, plan, ours, theirs)
    return replace(
        evidence,
        tests=tests,
        stage=_stage_counts(evidence.stage, stage, ours, theirs, plan),
        not_worse=with_look(evidence.not_worse, plan, ours, theirs),
    )


def after_incident(evidence: Evidence, plan: Plan, now: float) -> Evidence:
    """New tests where a shared incident's failures are in them: the tests on each variant's own traffic
    (error_rate's thresholds, the TTFT SLO's), the only ones a shared incident fails. The comparisons
    (error_rate's blame, error_ratio, the latency comparisons, an evidence gate's) keep their evidence:
    each is an e-process under "the candidate is no worse than the baseline" whatever both do alike,
    so the incident does not bias them, and going on spends none of the budget again."""
    tests = {name: kept for name, kept in evidence.tests.items() if name != TTFT_P95}  # it starts anew
    errors = tests.get(ERROR_RATE)
    if isinstance(errors, ErrorTests):
        fresh = ThresholdTest.new(plan.max_error_rate)
        tests[ERROR_RATE] = replace(errors, candidate=fresh, baseline=fresh, bounds=(0.0, 1.0))
    return replace(evidence, started=now, tests=tests)


def candidate_errors(evidence: Evidence) -> ThresholdTest | None:
    """The error test on the candidate's own traffic (an evidence gate reads it too)."""
    tests = evidence.tests.get(ERROR_RATE)
    return tests.candidate if isinstance(tests, ErrorTests) else None


def error_bounds(evidence: Evidence) -> tuple[float, float]:
    """The error rate's anytime confidence interval so far (status, the metrics)."""
    tests = evidence.tests.get(ERROR_RATE)
    return tests.bounds if isinstance(tests, ErrorTests) else (0.0, 1.0)


def busier_looks(evidence: Evidence) -> int:
    """Looks whose candidate requests the latency comparisons left out (its pods were busier)."""
    return max((t.busier_looks for t in evidence.tests.values() if isinstance(t, LatencyTests)), default=0)


def _stage_counts(
    counts: StageCounts, stage: str, ours: VariantLook, theirs: VariantLook, plan: Plan
) -> StageCounts:
    if counts.stage != stage:
        counts = StageCounts(stage)
    requests, errors = ours.counted(plan.client_units)
    return replace(
        counts,
        requests=counts.requests + requests,
        errors=counts.errors + errors,
        candidate_latency=_add_latency(counts.candidate_latency, ours, plan),
        baseline_latency=_add_latency(counts.baseline_latency, theirs, plan),
    )


def _add_latency(total: tuple[float, float], look: VariantLook, plan: Plan) -> tuple[float, float]:
    """`total` (TTFT seconds, count) plus the look's randomised first tokens, from what the plan judges."""
    seconds, count = total
    if plan.exact_latency:
        values = [v for stratum in randomised(look.ttft_values, plan).values() for v in stratum]
        return seconds + sum(values), count + len(values)
    strata = randomised(look.ttft, plan).values()
    return seconds + sum(h.seconds for h in strata), count + sum(h.total for h in strata)
