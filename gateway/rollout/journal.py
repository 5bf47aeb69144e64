"""What the controller keeps of the rollout's recent past for `graystack status` and the metrics: its
recent alerts (each logged at WARNING and counted), the last decision's checks (their series follow the
checks that ran), and why the current sequential tests started (each start logged)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway.rollout import telemetry
from gateway.rollout.evidence import error_bounds
from gateway.rollout.reasons import INCIDENT_COUNTS
from gateway.rollout.rollout_state import RecordDecision, RolloutState
from gateway.rollout.views import check_dict

log = logging.getLogger(__name__)

ALERTS_KEPT = 10  # recent alerts shown in status


class Journal:
    def __init__(self, name: Callable[[], str], clock: Callable[[], float]) -> None:
        """`name`: the rollout's (read at each entry: a new spec may rename it)."""
        self._name = name
        self._clock = clock
        self.alerts: deque[dict[str, Any]] = deque(maxlen=ALERTS_KEPT)
        self.last_decision: dict[str, Any] | None = None
        self.tests_started: str | None = None

    def alert(self, message: str, now: float | None = None) -> None:
        log.warning("rollout %s: ALERT: %s", self._name(), message)
        telemetry.ALERTS.labels(self._name()).inc()
        self.alerts.append({"at": self._clock() if now is None else now, "message": message})

    def new_tests(self, why: str) -> None:
        self.tests_started = why
        log.warning("rollout %s: new sequential tests: %s", self._name(), why)

    def decision(self, decision: RecordDecision, state: RolloutState, now: float) -> None:
        ran = {check.name for check in decision.checks}
        if self.last_decision is not None:
            telemetry.forget_checks(self._name(), {c["name"] for c in self.last_decision["checks"]} - ran)
        evidence = state.evidence
        telemetry.record_checks(self._name(), decision.checks, error_bounds(evidence) if evidence else None)
        checks = [check_dict(c) for c in decision.checks]
        self.last_decision = {"at": now, "outcome": decision.outcome.sentence, "checks": checks}
        counted = INCIDENT_COUNTS.get(decision.outcome.reason)
        if counted is not None:
            telemetry.SHARED_INCIDENTS.labels(self._name(), counted).inc()
