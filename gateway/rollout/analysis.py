"""Analysis: the rollout's evidence (gateway/rollout/evidence.py) read as checks with verdicts. Pure.

Each check records its value, samples, bound and threshold, and for a sequential test its evidence
(the log e-value, or the change detector's log statistic) against its log bound, so `graystack
status`, the metrics and the Rollout decisions dashboard show why a rollout moved: a rollback is the
evidence crossing its bound. Verdicts and their policies:
  pass          no evidence against the variant, and (error_rate) enough evidence for this stage; a
                latency check with no data at all passes too, saying so (it has nothing to judge)
  fail          a test crossed its bound: roll back at once (or hold, for a shared incident whose
                policy says so)
  inconclusive  not enough evidence yet (too few requests this stage, no data at all): hold
  error         the metrics could not be read: retry, then freeze or roll back (spec's on_error)

A test that fires for the candidate while the same test on the baseline's own traffic has fired too is
a shared incident (an upstream dependency, a GPU node), not the candidate's: its check says so
(`shared`), and `analysis.on_shared_incident` decides what the machine does with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.rollout.evidence import Evidence, fired
from gateway.rollout.plan import (
    CHECK_NAMES,
    ERROR_RATE,
    ERROR_RATE_CHANGE,
    ERROR_RATIO,
    ITL_VS_BASELINE,
    TTFT_P95,
    TTFT_VS_BASELINE,
    WEIGHT_STATUS,
    Plan,
)
from gateway.rollout.quality_checks import judge_check, shadow_agreement, structure_check
from gateway.rollout.sequential import ExactShiftTest, RatioTest, ShiftTest, ThresholdTest
from gateway.rollout.verdicts import Check, Verdict, given
from gateway.spec.strategy import Analysis

__all__ = ["CHECK_NAMES", "Check", "Verdict", "analyse", "error_checks"]


def error_checks(reason: str, plan: Plan | None) -> list[Check]:
    """Every check of the plan as an ERROR: the metrics could not be read this look."""
    # the plan's tests that are checks (the evidence gate's `not_worse` is not: it never fails a look)
    names = (
        CHECK_NAMES
        if plan is None
        else [*(t for t in plan.tests if t in CHECK_NAMES), ERROR_RATE_CHANGE, WEIGHT_STATUS]
    )
    return [Check(name, Verdict.ERROR, None, 0, None, 0.0, reason) for name in names]


def analyse(
    spec: Analysis,
    plan: Plan,
    evidence: Evidence,
    weight_status: Sequence[str],
    effective_windows: Sequence[int],
    shadowing: bool = False,
    mismatches: Sequence[str] = (),
    judge_problem: str | None = None,
) -> list[Check]:
    """The checks for the candidate after this look; shadow agreement and the judge only in a shadow
    stage (after it, no copy is compared, and a check left inconclusive would hold every later stage).
    `mismatches`: the reasons of the candidate's probes that find their server did not load the
    checkpoint they read; `judge_problem`: why the judge's last call gave no verdict."""
    checks = [_error_rate(plan, evidence), _error_change(plan, evidence)]
    if evidence.error_ratio is not None:
        checks.append(_error_ratio(plan, evidence, evidence.error_ratio))
    if evidence.candidate_ttft is not None:
        checks.append(_ttft_slo(plan, evidence, evidence.candidate_ttft))
    if plan.max_latency_ratio is not None:
        ratio = evidence.stage.latency_ratio()
        ttft, itl = (
            (evidence.ttft_exact, evidence.itl_exact)
            if plan.exact_latency
            else (evidence.ttft_shift, evidence.itl_shift)
        )
        checks.append(_shift(TTFT_VS_BASELINE, "first-token", plan, ttft, evidence, ratio))
        checks.append(_shift(ITL_VS_BASELINE, "inter-token", plan, itl, evidence, None))
    if spec.expected_weight_status is not None or spec.max_effective_window is not None:
        checks.append(_weight_status(spec, weight_status, effective_windows, mismatches))
    if evidence.disagreement is not None and shadowing:
        checks.append(shadow_agreement(plan, evidence.disagreement))
    if evidence.structure is not None and (shadowing or plan.structure_live):
        checks.append(structure_check(plan, evidence.structure, evidence.length_cuts))
    if evidence.judge is not None and shadowing:
        checks.append(judge_check(plan, evidence.judge, evidence.judge_ties, judge_problem))
    return checks


def _threshold_check(name: str, test: ThresholdTest, plan: Plan, shared: bool, reason: str) -> Check:
    """A check of `test` against the plan's bound: fail once it fired."""
    verdict = Verdict.FAIL if fired(test.log_evalue, plan.log_bound) else Verdict.PASS
    rate = test.events / test.requests if test.requests else None
    return Check(name, verdict, rate, test.requests, None, test.p0, reason, test.log_evalue, plan.log_bound,
                 shared and verdict == Verdict.FAIL)  # fmt: skip


def _units(plan: Plan) -> str:
    """What the error tests count: requests, or with cohorts each client once (metrics/client_units.py)."""
    return "observations (a client counted once)" if plan.client_units else "requests"


def _error_rate(plan: Plan, evidence: Evidence) -> Check:
    test, stage = evidence.candidate_errors, evidence.stage
    lower, upper = evidence.error_bounds
    failing = fired(test.log_evalue, plan.log_bound)
    shared = _baseline_fired(plan, evidence.baseline_errors)
    counts = f"{test.events} errors in {test.requests} candidate {_units(plan)} this rollout"
    if failing:
        reason = (
            f"error rate above {plan.max_error_rate:.2%}: log e-value {test.log_evalue:.2f} >= "
            f"{plan.log_bound:.2f} (alpha {plan.alpha:.2%}), {counts}, "
            f"anytime {1 - plan.alpha:.1%} CS [{lower:.3%}, {upper:.3%}]"
        )
        verdict, bound = Verdict.FAIL, lower
    elif stage.requests < plan.stage_requests:
        reason = (
            f"extending: {stage.requests} of the {plan.stage_requests} candidate {_units(plan)} this stage "
            f"needs to catch its smallest regression; {counts}"
        )
        verdict, bound = Verdict.INCONCLUSIVE, upper
    else:
        reason = f"no evidence above {plan.max_error_rate:.2%}; {counts}, CS [{lower:.3%}, {upper:.3%}]"
        verdict, bound = Verdict.PASS, upper
    rate = test.events / test.requests if test.requests else None
    return Check(ERROR_RATE, verdict, rate, test.requests, bound, plan.max_error_rate,
                 _shared_reason(reason, failing and shared), test.log_evalue, plan.log_bound,
                 failing and shared)  # fmt: skip


def _error_change(plan: Plan, evidence: Evidence) -> Check:
    test = evidence.candidate_errors
    baseline = evidence.baseline_errors
    failing = fired(test.log_detector, plan.log_detector_bound)
    shared = failing and (
        fired(baseline.log_detector, plan.log_detector_bound) or fired(baseline.log_evalue, plan.log_bound)
    )
    if failing:
        reason = (
            f"the error rate rose above {plan.max_error_rate:.2%}: change detector log statistic "
            f"{test.log_detector:.2f} >= {plan.log_detector_bound:.2f}"
        )
    else:
        reason = f"no change above {plan.max_error_rate:.2%} ({test.steps} looks with traffic)"
    verdict = Verdict.FAIL if failing else Verdict.PASS
    return Check(ERROR_RATE_CHANGE, verdict, None, test.requests, None, plan.max_error_rate,
                 _shared_reason(reason, shared), test.log_detector, plan.log_detector_bound, shared)  # fmt: skip


def _baseline_fired(plan: Plan, baseline: ThresholdTest) -> bool:
    return fired(baseline.log_evalue, plan.log_bound) or fired(baseline.log_detector, plan.log_detector_bound)


def _shared_reason(reason: str, shared: bool) -> str:
    return f"shared incident (the baseline's own traffic fires the same test): {reason}" if shared else reason


def _error_ratio(plan: Plan, evidence: Evidence, test: RatioTest) -> Check:
    most = given(plan.max_error_ratio, "max_error_ratio")
    ours, theirs = evidence.candidate_errors, evidence.baseline_errors
    ratio = None
    if ours.requests and theirs.requests and theirs.events:
        ratio = (ours.events / ours.requests) / (theirs.events / theirs.requests)
    failing = fired(test.log_evalue, plan.log_bound)
    reason = (
        f"candidate errors {'above' if failing else 'not shown above'} {most:g}x the "
        f"baseline's: log e-value {test.log_evalue:.2f} vs {plan.log_bound:.2f}; "
        f"{ours.events}/{ours.requests} against {theirs.events}/{theirs.requests}"
    )
    verdict = Verdict.FAIL if failing else Verdict.PASS
    return Check(ERROR_RATIO, verdict, ratio, ours.requests, None, most, reason,
                 test.log_evalue, plan.log_bound)  # fmt: skip


def _measurements_missing(plan: Plan, evidence: Evidence) -> str | None:
    """Why a latency check judged on the gateway's answers has nothing to judge though the candidate had
    requests (its answers never reached the gateway): such a check holds, never passes. None otherwise."""
    requests = evidence.sent
    if not plan.exact_latency or evidence.answered or not requests:
        return None
    return (
        f"measurements missing: Envoy sent the candidate {requests} requests and the gateway measured "
        "none of its answers (is Envoy's access log reaching the gateway's xDS port?): nothing to judge, "
        "so no pass"
    )


def _ttft_slo(plan: Plan, evidence: Evidence, test: ThresholdTest) -> Check:
    if missing := _measurements_missing(plan, evidence):
        return Check(TTFT_P95, Verdict.INCONCLUSIVE, None, 0, None, test.p0, missing)
    if not test.requests:
        return Check(TTFT_P95, Verdict.PASS, None, 0, None, test.p0, _NO_LATENCY.format(what="TTFT"),
                     test.log_evalue, plan.log_bound)  # fmt: skip
    edge = given(evidence.ttft_edge, "the SLO's histogram edge")
    slo = given(plan.max_ttft_p95, "max_ttft_p95")
    baseline = given(evidence.baseline_ttft, "the baseline's SLO test")
    exact = "" if abs(edge - slo) < 1e-6 * edge else f" (the histogram's next edge, {edge:g}s)"
    if plan.exact_latency:
        exact = " (each answer's exact time, as the gateway measured it)"
    reason = (
        f"{test.events} of {test.requests} first tokens slower than {edge:g}s{exact}, p95 SLO "
        f"{slo:g}s: log e-value {test.log_evalue:.2f} vs {plan.log_bound:.2f}"
    )
    return _threshold_check(TTFT_P95, test, plan, _baseline_fired(plan, baseline), reason)


# A latency check with nothing to judge neither holds a rollout nor passes it on evidence: a server that
# exports no latency histogram (not graystack's), or answers of one token (no inter-token gap), would
# otherwise hold every stage forever. Its samples (0) and this reason say so in status.
_NO_LATENCY = (
    "no {what} observed from both variants on randomised traffic yet: nothing to judge (the servers' "
    "histograms (graystack's, vLLM's, or provider.histograms) feed it, else the probes' for TTFT; null in "
    "the spec turns it off)"
)


def _shift(
    name: str,
    what: str,
    plan: Plan,
    test: ShiftTest | ExactShiftTest | None,
    evidence: Evidence,
    ratio: float | None,
) -> Check:
    """A latency comparison: fails when its e-value or its change detector crosses its bound."""
    threshold = given(plan.max_latency_ratio, "max_latency_ratio")
    seen = evidence.ttft_seen if name == TTFT_VS_BASELINE else evidence.itl_seen
    if missing := _measurements_missing(plan, evidence):
        return Check(name, Verdict.INCONCLUSIVE, None, 0, None, threshold, missing)
    busier = (
        f"; {evidence.busier_looks} looks left out (the candidate's pods were busier than the baseline's)"
        if evidence.busier_looks
        else ""
    )
    if test is None or not seen:
        why = _NO_LATENCY.format(what=f"{what} latency") + busier
        return Check(name, Verdict.PASS, ratio, 0, None, threshold, why)
    changed = fired(test.log_detector, plan.log_detector_bound)
    failing = changed or fired(test.log_evalue, plan.log_bound)
    probed = evidence.ttft_probed if name == TTFT_VS_BASELINE else 0
    source = f" ({probed} from the probes' requests: the servers export no TTFT histogram)" if probed else ""
    if plan.exact_latency:
        source = " (each answer's exact time, as the gateway measured it)"
    reason = (
        f"{what} latency {'more' if failing else 'not shown more'} than {threshold:g}x the baseline's in "
        f"distribution over {seen} candidate samples{source}: log e-value {test.log_evalue:.2f} vs "
        f"{plan.log_bound:.2f}, change detector {test.log_detector:.2f} vs {plan.log_detector_bound:.2f}{busier}"
    )
    verdict = Verdict.FAIL if failing else Verdict.PASS
    # the evidence shown is the statistic that fired (the detector where it did), else the e-value
    shown, bound = (
        (test.log_detector, plan.log_detector_bound) if changed else (test.log_evalue, plan.log_bound)
    )
    return Check(name, verdict, ratio, seen, None, threshold, reason, shown, bound)


def _weight_status(
    spec: Analysis, statuses: Sequence[str], windows: Sequence[int], mismatches: Sequence[str] = ()
) -> Check:
    """The checkpoint form the pods serve: the probes' statuses, whether each server loaded the file its
    probe reads (a file that reads ERASED says nothing of a server that loaded it ACTIVE, or dropped
    the bias tensors on load), and, with `max_effective_window`, the model servers' effective windows
    (an ACTIVE status alone does not tell the derived sparse bias from one spanning the whole context).
    Evidence against any fails (every finding in the reason) before missing evidence holds."""
    bound, expected = spec.max_effective_window, spec.expected_weight_status
    unexpected = sorted(set(statuses) - set(expected)) if expected is not None else []
    wider = [window for window in windows if bound is not None and window > bound]
    findings = [
        f"a server did not load its probe's checkpoint: {reason}" for reason in sorted(set(mismatches))
    ]
    if wider:
        findings.insert(
            0, f"pods serve effective window {sorted(set(wider))}, above max_effective_window {bound}"
        )
    if unexpected:
        findings.insert(0, f"pods report {unexpected}, expected one of {expected}")
    if findings:
        failing = float(len(unexpected) + len(wider) + len(mismatches))
        return Check(WEIGHT_STATUS, Verdict.FAIL, failing, len(statuses), None, 0.0, "; ".join(findings))
    if expected is not None and not statuses:
        return Check(WEIGHT_STATUS, Verdict.INCONCLUSIVE, None, 0, None, 0.0, "no probe has reported")
    if bound is not None and not windows:
        reason = "no model server has reported its effective window"
        return Check(WEIGHT_STATUS, Verdict.INCONCLUSIVE, None, 0, None, 0.0, reason)
    reason = f"all {len(statuses)} pods as expected" if expected is not None else "statuses not checked"
    if bound is not None:
        reason += f", effective windows {sorted(set(windows))} within {bound}"
    return Check(WEIGHT_STATUS, Verdict.PASS, 0.0, len(statuses), None, 0.0, reason)


def by_name(checks: Sequence[Check]) -> Mapping[str, Check]:
    return {check.name: check for check in checks}
