"""Analysis: turn what the metrics providers measured over a window into checks with verdicts.

Pure. Each check records its value, sample count, bound and threshold, so `graystack status` and
the `graystack_analysis_checks_total` metric can say why a rollout moved (Flagger's and Argo's
dashboards show traffic, not decisions). Verdicts and their policies:
  pass          evidence that the variant is fine
  fail          evidence that it is not: roll back at once
  inconclusive  not enough evidence either way (e.g. too few requests): hold, never a pass
  error         the metrics could not be read: retry, then freeze or roll back (spec's on_error)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.rollout.spec import Analysis
from gateway.rollout.stats import Verdict, decide_error_rate


@dataclass(frozen=True)
class VariantWindow:
    """One variant over the analysis window, as a provider measured it."""

    requests: float  # attempts that reached the variant
    errors: float  # of those, failed (5xx, resets, and attempts that a fallback retry hid)
    latency_p99: float | None = None  # seconds
    ttft_p95: float | None = None  # seconds
    recent_requests: float = 0.0  # the same two counts over the window's most recent part
    recent_errors: float = 0.0
    shadow_compared: float = 0.0  # shadow copies whose greedy answer was compared with the baseline's
    shadow_agreed: float = 0.0  # of those, the same answer


@dataclass(frozen=True)
class Observations:
    variants: Mapping[str, VariantWindow] = field(default_factory=dict)
    weight_status: Mapping[str, Sequence[str]] = field(
        default_factory=dict
    )  # variant -> its probes' statuses
    effective_windows: Mapping[str, Sequence[int]] = field(
        default_factory=dict
    )  # variant -> the distance past which each of its model servers' bias is zero (0: no bias)
    error: str | None = None  # the provider could not measure (query failed, target down)


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    value: float | None
    samples: int
    bound: float | None
    threshold: float
    reason: str


def _error_check(name: str, threshold: float, reason: str) -> Check:
    return Check(name, Verdict.ERROR, None, 0, None, threshold, reason)


CHECK_NAMES = ("error_rate", "latency_ratio", "ttft_p95", "weight_status")


def analyse(
    spec: Analysis, seen: Observations, candidate: str, baseline: str, shadowing: bool = False
) -> list[Check]:
    """The error-rate, latency-ratio, TTFT and weight-status checks for `candidate`; and its shadow
    agreement where asked for, while in a shadow stage (`shadowing`) or while compared answers remain
    in the window."""
    thresholds = (spec.max_error_rate, spec.max_latency_ratio, spec.max_ttft_p95, 0.0)
    if seen.error is not None:
        return [_error_check(n, t, seen.error) for n, t in zip(CHECK_NAMES, thresholds, strict=True)]
    ours, theirs = seen.variants.get(candidate), seen.variants.get(baseline)
    checks = [
        _error_rate(spec, ours),
        _latency_ratio(spec, ours, theirs),
        _ttft(spec, ours),
        _weight_status(
            spec, seen.weight_status.get(candidate, ()), seen.effective_windows.get(candidate, ())
        ),
    ]
    compared = ours is not None and ours.shadow_compared > 0
    if spec.min_shadow_agreement is not None and (compared or shadowing):
        checks.append(_shadow_agreement(spec, ours) if compared else _nothing_compared(spec))
    return checks


def _counts(requests: float, errors: float) -> tuple[int, int]:
    """Whole counts, errors capped at requests (a failed fallback is charged to the variant too)."""
    return min(int(errors), int(requests)), int(requests)


def _error_rate(spec: Analysis, ours: VariantWindow | None) -> Check:
    ours = ours or VariantWindow(requests=0, errors=0)
    errors, requests = _counts(ours.requests, ours.errors)
    recent = _counts(ours.recent_requests, ours.recent_errors)
    decision = decide_error_rate(errors, requests, spec.max_error_rate, spec.min_requests, recent)
    bound = decision.bounds.lower if decision.verdict == Verdict.FAIL else decision.bounds.upper
    return Check(
        "error_rate", decision.verdict, decision.rate, requests, bound, spec.max_error_rate, decision.reason
    )


def _latency_ratio(spec: Analysis, ours: VariantWindow | None, theirs: VariantWindow | None) -> Check:
    threshold = spec.max_latency_ratio
    samples = int(ours.requests) if ours else 0
    if samples < spec.min_requests or not theirs or not ours.latency_p99 or not theirs.latency_p99:
        return Check(
            "latency_ratio", Verdict.INCONCLUSIVE, None, samples, None, threshold, "not enough latency data"
        )
    ratio = ours.latency_p99 / theirs.latency_p99
    verdict = Verdict.FAIL if ratio > threshold else Verdict.PASS
    return Check(
        "latency_ratio", verdict, ratio, samples, None, threshold, f"p99 {ratio:.2f}x the baseline's"
    )


def _ttft(spec: Analysis, ours: VariantWindow | None) -> Check:
    threshold = spec.max_ttft_p95
    samples = int(ours.requests) if ours else 0
    if samples < spec.min_requests or ours.ttft_p95 is None:
        return Check("ttft_p95", Verdict.INCONCLUSIVE, None, samples, None, threshold, "not enough TTFT data")
    verdict = Verdict.FAIL if ours.ttft_p95 > threshold else Verdict.PASS
    return Check(
        "ttft_p95", verdict, ours.ttft_p95, samples, None, threshold, f"TTFT p95 {ours.ttft_p95:.3f}s"
    )


def _weight_status(spec: Analysis, statuses: Sequence[str], windows: Sequence[int]) -> Check:
    """The checkpoint form the pods serve: the probes' statuses and, with `max_effective_window`, the
    model servers' effective windows (an ACTIVE status alone does not tell the derived sparse bias from
    one spanning the whole context). Evidence against either fails before missing evidence holds."""
    bound = spec.max_effective_window
    unexpected = sorted(set(statuses) - set(spec.expected_weight_status))
    if unexpected:
        reason = f"pods report {unexpected}, expected one of {spec.expected_weight_status}"
        return Check("weight_status", Verdict.FAIL, float(len(unexpected)), len(statuses), None, 0.0, reason)
    wider = [window for window in windows if bound is not None and window > bound]
    if wider:
        reason = f"pods serve effective window {sorted(set(wider))}, above max_effective_window {bound}"
        return Check("weight_status", Verdict.FAIL, float(len(wider)), len(windows), None, 0.0, reason)
    if not statuses:
        return Check("weight_status", Verdict.INCONCLUSIVE, None, 0, None, 0.0, "no probe has reported")
    if bound is not None and not windows:
        reason = "no model server has reported its effective window"
        return Check("weight_status", Verdict.INCONCLUSIVE, None, 0, None, 0.0, reason)
    reason = f"all {len(statuses)} pods as expected"
    if bound is not None:
        reason += f", effective windows {sorted(set(windows))} within {bound}"
    return Check("weight_status", Verdict.PASS, 0.0, len(statuses), None, 0.0, reason)


def _nothing_compared(spec: Analysis) -> Check:
    """A shadow stage with no compared answer holds: agreement was asked for, and nothing shows it."""
    reason = (
        "no shadow answer compared with the baseline's yet (greedy requests only; is the candidate "
        "started with `serve --compare-with`?)"
    )
    return Check("shadow_agreement", Verdict.INCONCLUSIVE, None, 0, None, spec.min_shadow_agreement, reason)


def _shadow_agreement(spec: Analysis, ours: VariantWindow) -> Check:
    """Only where shadow copies were compared (a shadow stage): disagreements judged as errors are,
    against 1 - min_shadow_agreement, so a pass needs as much evidence as an error-rate pass."""
    differed, compared = _counts(ours.shadow_compared, ours.shadow_compared - ours.shadow_agreed)
    most = 1 - spec.min_shadow_agreement
    decision = decide_error_rate(differed, compared, most, spec.min_requests)
    bound = decision.bounds.lower if decision.verdict == Verdict.FAIL else decision.bounds.upper
    reason = (
        f"{compared - differed} of {compared} shadow answers equal the baseline's: "
        + decision.reason.replace("error rate", "disagreement")
    )
    return Check(
        "shadow_agreement",
        decision.verdict,
        1 - differed / compared,
        compared,
        1 - bound,
        spec.min_shadow_agreement,
        reason,
    )
