"""Analysis: the rollout's evidence (gateway/rollout/evidence.py) read as checks with verdicts. Pure.

Each check records its value, samples, bound and threshold, and for a sequential test its evidence
(the log e-value, or the change detector's log statistic) against its log bound, so `graystack
status`, the metrics and the Rollout decisions dashboard show why a rollout moved: a rollback is the
evidence crossing its bound. Verdicts and their policies:
  pass          no evidence against the variant, and (error_rate) enough evidence for this stage; a
                latency check with no data at all passes too, saying so (it has nothing to judge)
  fail          a test crossed its bound: roll back at once (or hold, for a shared incident whose
                policy says so)
  inconclusive  not enough evidence yet (too few requests this stage, no data at all; an error test
                that fired but is not yet told the candidate's or shared): hold
  error         the metrics could not be read: retry, then freeze or roll back (spec's on_error)

A failure both variants share (an upstream dependency, a GPU node) is not the candidate's: its check
says so (`shared`), and `analysis.on_shared_incident` decides what the machine does with it. The error
checks tell it by comparing the two variants' errors at equal exposure, not by which test fired first
(gateway/rollout/checks/errors.py); the TTFT SLO by the same test on the baseline's own traffic.

Each check reads its own tests (gateway/rollout/checks/): here the table is walked in its order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gateway.rollout.checks.base import Moment, Plan
from gateway.rollout.checks.table import CHECK_NAMES, CHECKS
from gateway.rollout.evidence import Evidence
from gateway.rollout.verdicts import Check, Verdict

__all__ = ["CHECK_NAMES", "Check", "Verdict", "analyse", "by_name", "error_checks"]


def error_checks(reason: str, plan: Plan | None) -> list[Check]:
    """Every check of the plan as an ERROR: the metrics could not be read this look."""
    names = (
        CHECK_NAMES
        if plan is None
        else [n for row in CHECKS if row.name in plan.settings for n in row.checks]
    )
    return [Check(name, Verdict.ERROR, None, 0, None, 0.0, reason) for name in names]


def analyse(plan: Plan, evidence: Evidence, moment: Moment) -> list[Check]:
    """The checks for the candidate after this look (`moment`: what the probes and the judge said, and
    whether this is a shadow stage; its stage counts are taken from `evidence`)."""
    stage = evidence.stage
    moment = replace(moment, stage_observations=stage.requests, latency_ratio=stage.latency_ratio())
    checks: list[Check] = []
    for row in CHECKS:
        if row.name in plan.settings:
            checks += row.verdicts(evidence.tests.get(row.name), plan.settings[row.name], plan, moment)
    return checks


def by_name(checks: Sequence[Check]) -> Mapping[str, Check]:
    return {check.name: check for check in checks}
