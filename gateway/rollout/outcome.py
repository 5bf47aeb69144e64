"""What one look decided, typed: the reason (`Reason`) and its evidence (`Outcome`), from which the
sentence in `graystack status` and the logs is written. Readers (gateway/rollout/reasons.py: the
Kubernetes Events and the notifications) key on the reason, never on the sentence, so rewording one
changes what people read and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    """Every outcome the machine (gateway/rollout/machine.py) and its gates (gates.py) produce."""

    STEPPED = "stepped"  # shadow -> step 0, or step i -> i+1
    PROMOTED = "promoted"  # past the last step
    ROLLED_BACK = "rolled_back"  # a failing check, a webhook's on_failure, on_error: rollback
    FROZEN = "frozen"  # on_error: freeze, at the error limit
    FROZEN_CAPACITY = "frozen_capacity"  # the candidate's pods not ready past the gate's timeout
    GUARD_ONLY = "guard_only"  # promoted or manual: only the guard runs
    RECORDED_ONLY = "recorded_only"  # rolled back: the checks are recorded, nothing moves
    PAUSED = "paused"
    COMMAND_MOVED = "command_moved"  # an operator command moved the rollout in this look
    HOLD_TIME = "hold_time"  # the stage's own hold has not elapsed
    INCONCLUSIVE = "inconclusive"  # a check is not (yet) PASS
    SHADOW_GATE = "shadow_gate"  # the shadow gate's success rate or latency ratio missed
    CAPACITY = "capacity"  # the candidate's pods for the next weight are not ready
    SPLIT_UNPROVEN = "split_unproven"  # the user's gateway has not yet been shown to serve the split
    SPLIT_REFUTED = "split_refuted"  # its data plane serves another split than the one written
    METRICS_ERROR = "metrics_error"  # below the error limit
    METRICS_ERROR_ESCALATED = "metrics_error_escalated"  # past it: on_error has applied already
    SHARED_INCIDENT = "shared_incident"  # the baseline fails the same test: alerted in this look
    SHARED_INCIDENT_STANDING = "shared_incident_standing"  # alerted before; its new tests fired again
    SHARED_INCIDENT_CLEARING = "shared_incident_clearing"  # its new tests quiet, not yet for incident_clear
    SHARED_INCIDENT_CLEARED = "shared_incident_cleared"  # quiet for incident_clear: over, its pause lifted
    CALLING_WEBHOOKS = "calling_webhooks"  # the next step's webhooks have not answered yet
    WEBHOOK_FAILED = "webhook_failed"  # one answered a failure; called again after a while
    AWAITING_APPROVAL = "awaiting_approval"  # approval: manual
    EVIDENCE_GATE = "evidence_gate"  # approval: evidence, not yet shown not worse
    EXPERIMENT_RUNNING = "experiment_running"  # strategy: experiment, neither its duration nor a decision yet
    EXPERIMENT_CONCLUDED = "experiment_concluded"  # ... and now one of them


# What each outcome says: (verb, why), written "verb: why" (the why alone where the verb is empty).
# A template names the `Outcome` fields it needs; `checks` is written as a list.
SENTENCES: dict[Reason, tuple[str, str]] = {
    Reason.STEPPED: ("", "advance to step {step}"),
    Reason.PROMOTED: ("", "advance to promoted"),
    Reason.ROLLED_BACK: ("", "rollback"),
    Reason.FROZEN: ("", "freeze"),
    Reason.FROZEN_CAPACITY: ("freeze", "capacity"),
    Reason.GUARD_ONLY: ("guard", "no failing check"),
    Reason.RECORDED_ONLY: ("recorded only", "rolled back"),
    Reason.PAUSED: ("hold", "paused"),
    Reason.COMMAND_MOVED: ("hold", "a command moved the rollout this interval"),
    Reason.HOLD_TIME: ("hold", "{seconds:.0f}s of {limit:.0f}s held"),
    Reason.INCONCLUSIVE: ("hold", "inconclusive {checks}"),
    Reason.SHADOW_GATE: ("hold", "shadow gate: {cause}"),
    Reason.CAPACITY: ("hold", "capacity: {cause} ({seconds:.0f}s of {limit:.0f}s)"),
    Reason.SPLIT_UNPROVEN: ("hold", "the split is not yet proven served: {cause}"),
    Reason.SPLIT_REFUTED: ("hold", "the gateway does not serve the split written: {cause}"),
    Reason.METRICS_ERROR: ("hold", "metrics error {count} of {limit:.0f}: {cause}"),
    Reason.METRICS_ERROR_ESCALATED: ("hold", "metrics error {count} (already escalated): {cause}"),
    Reason.SHARED_INCIDENT: ("hold", "shared incident"),
    Reason.SHARED_INCIDENT_STANDING: ("hold", "shared incident (alerted; goes on once new tests stay quiet)"),
    Reason.SHARED_INCIDENT_CLEARING: (
        "hold",
        "shared incident: new tests quiet for {seconds:.0f}s of {limit:.0f}s",
    ),
    Reason.SHARED_INCIDENT_CLEARED: ("", "shared incident over: new tests quiet for {seconds:.0f}s"),
    Reason.CALLING_WEBHOOKS: ("hold", "calling the webhooks of step {step}"),
    Reason.WEBHOOK_FAILED: ("hold", "webhook before step {step}: {cause} (called again every {limit:.0f}s)"),
    Reason.AWAITING_APPROVAL: (
        "hold",
        "awaiting approval of step {step} (weight {weight}%): graystack approve",
    ),
    Reason.EXPERIMENT_RUNNING: (
        "hold",
        "experiment: {seconds:.0f}s of {limit:.0f}s, not every difference decided",
    ),
    Reason.EXPERIMENT_CONCLUDED: ("", "experiment concluded: {cause}"),
    Reason.EVIDENCE_GATE: (
        "hold",
        "awaiting approval of step {step} (weight {weight}%): graystack approve: not yet shown not worse: "
        "{cause}",
    ),
}


Identity = tuple[Reason, int | None, tuple[str, ...]]  # see `Outcome.identity`


@dataclass(frozen=True)
class Outcome:
    """A reason and its evidence: only the fields its sentence names are set."""

    reason: Reason
    step: int | None = None  # the step taken, or the one whose gate holds
    weight: int | None = None  # that step's weight
    seconds: float | None = None  # held, or waited for capacity
    limit: float | None = None  # the hold needed, the capacity timeout, the webhook retry, the error limit
    count: int | None = None  # consecutive metrics-error looks
    checks: tuple[str, ...] = ()  # what it waits on: checks not PASS, a shadow gate's check, parts not shown
    cause: str = ""  # the words from elsewhere: a check's error, a webhook's answer, a gate's miss

    @property
    def why(self) -> str:
        """The outcome in words, without its verb (what a reader's own sentence quotes)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return SENTENCES[self.reason][1].format(**{**fields, "checks": list(self.checks) or "no checks"})

    @property
    def sentence(self) -> str:
        """The outcome for people (`graystack status`, the logs): "hold: 12s of 600s held"."""
        verb = SENTENCES[self.reason][0]
        return f"{verb}: {self.why}" if verb else self.why

    def identity(self) -> Identity:
        """What makes a standing hold the same one at the next look: its reason, the step its gate
        stands before and what it waits on; not its numbers or words (they move at every look)."""
        return self.reason, self.step, self.checks
