"""weight_status: the checkpoint form the candidate's pods serve, from its probes. Pure; no tests kept.

The probes' statuses (against expected_weight_status), whether each server loaded the file its probe
reads (a file that reads ERASED says nothing of a server that loaded it ACTIVE, or dropped the bias
tensors on load), and, with `max_effective_window`, the model servers' effective windows (an ACTIVE
status alone does not tell the derived sparse bias from one spanning the whole context). Evidence
against any fails (every finding in the reason) before missing evidence holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.rollout.checks.base import Moment, Off, Plan
from gateway.rollout.increments import VariantLook
from gateway.rollout.verdicts import Check, Verdict
from gateway.spec.model import RolloutSpec

WEIGHT_STATUS = "weight_status"


@dataclass(frozen=True)
class WeightSettings:
    expected: tuple[str, ...] | None  # the statuses the pods may report (None: not checked)
    max_window: int | None  # the widest effective window a server may serve (None: not checked)


class WeightStatus:
    name = WEIGHT_STATUS
    checks = (WEIGHT_STATUS,)
    signals: tuple[str, ...] = ()  # the probes' gauges, read beside the counters (Observations)
    budgeted = False
    detectors = 0

    def settings(self, spec: RolloutSpec) -> WeightSettings | Off:
        analysis = spec.analysis
        if analysis.expected_weight_status is None and analysis.max_effective_window is None:
            return Off("expected_weight_status is null: no probe is required")
        expected = analysis.expected_weight_status
        return WeightSettings(None if expected is None else tuple(expected), analysis.max_effective_window)

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        return {}  # no tests: what the probes say now is the whole verdict

    def start(self, settings: WeightSettings) -> None:
        return None

    def add(
        self, tests: None, settings: WeightSettings, plan: Plan, ours: VariantLook, theirs: VariantLook
    ) -> None:
        return None

    def verdicts(self, tests: None, settings: WeightSettings, plan: Plan, moment: Moment) -> Sequence[Check]:
        return [_verdict(settings, moment.weight_status, moment.effective_windows, moment.mismatches)]


def _verdict(
    settings: WeightSettings, statuses: Sequence[str], windows: Sequence[int], mismatches: Sequence[str]
) -> Check:
    bound, expected = settings.max_window, settings.expected
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
        findings.insert(0, f"pods report {unexpected}, expected one of {list(expected or ())}")
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
