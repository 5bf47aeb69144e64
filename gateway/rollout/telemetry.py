"""The rollout side's metric families (their names: gateway/families.py; docs/architecture.md tables them).

Beyond the first design: `graystack_analysis_check_value`, `graystack_analysis_check_threshold` and
`graystack_analysis_check_samples` (each check's last value, threshold and sample count, NaN while a
check has no value) so a dashboard can plot a check against its line with its evidence,
`graystack_variant_replicas` and `graystack_variant_cost_per_hour` (where rollout.capacity sizes
the variants: their pods, and what they cost), `graystack_rollout_segment_weight` (every header segment's split, which the default-split gauge does
not show), `graystack_rollout_alerts_total` (every Alert the controller logged), and the sequential
tests' evidence: `graystack_analysis_log_evalue` against `graystack_analysis_log_evalue_bound` (a rollback
is the first crossing) and the error rate's anytime confidence bounds `graystack_analysis_error_rate_bound`;
and an experiment's report, `graystack_experiment_difference` (gateway/rollout/checks/experiment.py).

Counters whose labels are known up front are created at 0 (`zero_rollout_series`), so that
Prometheus' increase() sees their first event: a series born at 1 is invisible to it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram

from gateway import families
from gateway.rollout.reasons import INCIDENT_COUNTS

if TYPE_CHECKING:
    from gateway.rollout.analysis import Check
    from gateway.rollout.status import ExperimentStatus

ROLLOUT_WEIGHT = Gauge(
    families.ROLLOUT_WEIGHT,
    "Percent of default-split traffic sent to each variant",
    ["rollout", "variant"],
)
SEGMENT_WEIGHT = Gauge(
    families.ROLLOUT_SEGMENT_WEIGHT,
    "Percent of a header segment's traffic sent to each variant (segment `default`: the default split)",
    ["rollout", "segment", "variant"],
)
SPEC_RELOADS = Counter(
    families.SPEC_RELOADS,
    "Spec changes seen, applied or refused (the last good spec stays live)",
    ["result"],
)
ROLLOUT_PHASE = Gauge(
    families.ROLLOUT_PHASE,
    "1 on the rollout's current phase (shadow, progressing, promoted, rolled_back, manual), 0 on the others",
    ["rollout", "phase"],
)
ROLLBACKS = Counter(
    families.ROLLOUT_ROLLBACKS,
    "Rollbacks, by reason: the first failing check's name, `operator`, `metrics_error` or `webhook`",
    ["rollout", "reason"],
)
ANALYSIS_CHECKS = Counter(
    families.ANALYSIS_CHECKS,
    "Analysis checks run, by check and result (pass, fail, inconclusive, error)",
    ["rollout", "check", "result"],
)
ANALYSIS_CHECK_VALUE = Gauge(
    families.ANALYSIS_CHECK_VALUE,
    "Each check's value in the last analysis interval (NaN: no value, e.g. too few requests)",
    ["rollout", "check"],
)
ANALYSIS_CHECK_THRESHOLD = Gauge(
    families.ANALYSIS_CHECK_THRESHOLD,
    "Each check's threshold in the last analysis interval",
    ["rollout", "check"],
)
ANALYSIS_CHECK_SAMPLES = Gauge(
    families.ANALYSIS_CHECK_SAMPLES,
    "The number of samples (requests, or probes) each check judged in the last analysis interval",
    ["rollout", "check"],
)
ANALYSIS_LOG_EVALUE = Gauge(
    families.ANALYSIS_LOG_EVALUE,
    "Each sequential test's evidence against the candidate: its log e-value (the change detector: its log "
    "statistic); the check fails when it reaches graystack_analysis_log_evalue_bound",
    ["rollout", "check"],
)
ANALYSIS_LOG_EVALUE_BOUND = Gauge(
    families.ANALYSIS_LOG_EVALUE_BOUND,
    "The log e-value at which each sequential test fails: log(1/alpha), alpha its share of the rollout's "
    "false-rollback budget (the change detector: log of its mean looks between false alarms)",
    ["rollout", "check"],
)
ERROR_RATE_BOUND = Gauge(
    families.ANALYSIS_ERROR_RATE_BOUND,
    "The candidate's error rate: anytime-valid confidence bounds over the rollout (side = lower, upper)",
    ["rollout", "side"],
)
EXPERIMENT_DIFFERENCE = Gauge(
    families.EXPERIMENT_DIFFERENCE,
    "strategy: experiment: each difference of the candidate against the baseline (error_rate: candidate "
    "minus baseline; ttft_p50, ttft_p90, tpot_p50, tpot_p90: candidate over baseline; where quality is on, "
    "structure_failures: minus; greedy_agreement, judge_win_rate: the candidate's share), its estimate and "
    "its anytime-valid interval (side = estimate, lower, upper; an upper not bounded yet is +Inf)",
    ["rollout", "difference", "side"],
)
ROLLBACK_SECONDS = Histogram(
    families.ROLLBACK_SECONDS,
    "From the first failing sample (or the operator's command) to every proxy's ACK of the rollback",
    ["rollout"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)
VARIANT_REPLICAS = Gauge(
    families.VARIANT_REPLICAS,
    "Each variant's replicas where rollout.capacity sizes them: `wanted` (set from the split), "
    "`running` (pods that exist and hold GPUs) and `ready`",
    ["rollout", "variant", "state"],
)
VARIANT_COST = Gauge(
    families.VARIANT_COST_PER_HOUR,
    "What each variant's running pods cost an hour: pods x GPUs per pod x rollout.capacity.gpuHourPrice",
    ["rollout", "variant"],
)
ALERTS = Counter(
    families.ROLLOUT_ALERTS,
    "Alerts the rollout controller raised (rollbacks, freezes, rollbacks not ACKed in time)",
    ["rollout"],
)

SHARED_INCIDENTS = Counter(
    families.ROLLOUT_SHARED_INCIDENTS,
    "Shared incidents held under on_shared_incident: hold (result `held`), and those over by themselves "
    "(`cleared`: new tests quiet for incident_clear)",
    ["rollout", "result"],
)

ROLLBACK_REASONS = (
    "error_rate",
    "error_rate_change",
    "error_ratio",
    "ttft_p95",
    "ttft_vs_baseline",
    "itl_vs_baseline",
    "weight_status",
    "shadow_agreement",
    "shared_incident",
    "operator",
    "metrics_error",
    "webhook",
)


def zero_rollout_series(rollout: str, checks: Iterable[str], verdicts: Iterable[str]) -> None:
    """Create the rollout's counters at 0 for every label value they can take."""
    for reason in ROLLBACK_REASONS:
        ROLLBACKS.labels(rollout, reason)
    for check, verdict in itertools.product(checks, verdicts):
        ANALYSIS_CHECKS.labels(rollout, check, verdict)
    ALERTS.labels(rollout)
    for result in INCIDENT_COUNTS.values():
        SHARED_INCIDENTS.labels(rollout, result)
    ROLLBACK_SECONDS.labels(rollout)


def record_phase(rollout: str, phase: str, phases: Iterable[str]) -> None:
    """1 on the rollout's phase, 0 on every other, so a dashboard can sum or pick one."""
    for each in phases:
        ROLLOUT_PHASE.labels(rollout, each).set(1 if each == phase else 0)


def forget_checks(rollout: str, checks: Iterable[str]) -> None:
    """Drop the last value, threshold and samples of checks that no longer run (shadow_agreement after
    the shadow stage): a gauge left at its last value would read as a current measurement."""
    for check in checks:
        for gauge in (
            ANALYSIS_CHECK_VALUE,
            ANALYSIS_CHECK_THRESHOLD,
            ANALYSIS_CHECK_SAMPLES,
            ANALYSIS_LOG_EVALUE,
            ANALYSIS_LOG_EVALUE_BOUND,
        ):
            with contextlib.suppress(KeyError):  # never set: nothing to drop
                gauge.remove(rollout, check)


def record_checks(rollout: str, checks: Sequence[Check], error_bounds: tuple[float, float] | None) -> None:
    """One look's checks: the verdict counted, each check's value, threshold, samples and sequential
    evidence set, and the error rate's anytime bounds."""
    for check in checks:
        ANALYSIS_CHECKS.labels(rollout, check.name, check.verdict.value).inc()
        value = float("nan") if check.value is None else check.value
        ANALYSIS_CHECK_VALUE.labels(rollout, check.name).set(value)
        ANALYSIS_CHECK_THRESHOLD.labels(rollout, check.name).set(check.threshold)
        ANALYSIS_CHECK_SAMPLES.labels(rollout, check.name).set(check.samples)
        if check.log_evalue is not None and check.log_bound is not None:
            ANALYSIS_LOG_EVALUE.labels(rollout, check.name).set(check.log_evalue)
            ANALYSIS_LOG_EVALUE_BOUND.labels(rollout, check.name).set(check.log_bound)
    for side, value in zip(("lower", "upper"), error_bounds or (), strict=False):
        ERROR_RATE_BOUND.labels(rollout, side).set(value)


def record_experiment(rollout: str, report: ExperimentStatus | None) -> None:
    """An experiment's differences as they stand (nothing where the rollout is no experiment)."""
    for difference in [*report.differences, *report.quality] if report is not None else ():
        sides = {
            "estimate": math.nan if difference.estimate is None else difference.estimate,
            "lower": difference.lower,
            "upper": math.inf if difference.upper is None else difference.upper,
        }
        for side, value in sides.items():
            EXPERIMENT_DIFFERENCE.labels(rollout, difference.name, side).set(value)


def forget_capacity() -> None:
    """Drop every capacity series: this process no longer sizes the variants (it stopped leading)."""
    VARIANT_REPLICAS.clear()
    VARIANT_COST.clear()


def record_capacity(rollout: str, view: dict[str, Any]) -> None:
    """A capacity look (gateway/rollout/capacity.py `capacity_view`): each variant's replicas and cost;
    a variant whose pods could not be counted keeps no stale count."""
    for variant, entry in view.get("variants", {}).items():
        for state in ("wanted", "running", "ready"):
            if state in entry:
                VARIANT_REPLICAS.labels(rollout, variant, state).set(entry[state])
            else:
                with contextlib.suppress(KeyError):
                    VARIANT_REPLICAS.remove(rollout, variant, state)
        if "cost_per_hour" in entry:
            VARIANT_COST.labels(rollout, variant).set(entry["cost_per_hour"])
