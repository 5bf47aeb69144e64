"""What each decision's reason (gateway/rollout/outcome.py) is told as, in one table: the Kubernetes
Event (gateway/rollout/story.py) and the notification (gateway/notify/events.py). As Argo Rollouts'
EventReason drives both its Event and its notification trigger, one row drives both here, so a hold
reworded for people is still told under the same names, and both readers keep a standing hold quiet
by the same identity (`Outcome.identity`).

Every reason has one place: `MOVES` (told when the states show the move, since an operator's command
makes the same moves without a decision), `NEWS` (told at the look that decides it, by its reason: the
end of a held incident, which the states show as a resume at most, and not at all under an operator's
own pause; an experiment's conclusion, a move to a phase that holds), `HOLDS` (told once while they stand; a pause and the routine holds, the stage's hold time
and a command's look, to fewer readers) or `UNTOLD`. A held incident's beginning and end are counted too
(`INCIDENT_COUNTS`: the journal, gateway/rollout/journal.py). Events and
notifications no decision makes (Paused, Resumed, Approved, StageChanged, Alert; paused,
inconclusive_too_long, rollback_acked, ...) are their readers' own.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.rollout.outcome import Reason


@dataclass(frozen=True)
class KubeEvent:
    """A Kubernetes Event's reason (CamelCase) and type: a warning when something went wrong or a
    person must act."""

    reason: str
    warning: bool = False


@dataclass(frozen=True)
class Moved:
    """A move to another stage: its Event and its notification kind (gateway.spec.notifications.EVENTS)."""

    event: KubeEvent
    notice: str


@dataclass(frozen=True)
class News:
    """News told at the look that decides it: its Event, its notification kind, and what happens next
    (the notification's last line, where no operator's pause holds the rollout)."""

    event: KubeEvent
    notice: str
    then: str


@dataclass(frozen=True)
class Held:
    """A hold, told once while it stands: its Event and its notification kind (None: not told there)."""

    event: KubeEvent | None
    notice: str | None


HOLDING = KubeEvent("Holding")
AWAITING_APPROVAL = KubeEvent("AwaitingApproval", warning=True)
CAPACITY_NOT_READY = "capacity_not_ready"
SPLIT_NOT_SERVED = "split_not_served"

MOVES: dict[Reason, Moved] = {
    Reason.STEPPED: Moved(KubeEvent("StepTaken"), "step_taken"),
    Reason.PROMOTED: Moved(KubeEvent("Promoted"), "promoted"),
    Reason.ROLLED_BACK: Moved(KubeEvent("RolledBack", warning=True), "rolled_back"),
}

NEWS: dict[Reason, News] = {
    Reason.SHARED_INCIDENT_CLEARED: News(KubeEvent("IncidentCleared"), "incident_cleared", "it goes on"),
    Reason.EXPERIMENT_CONCLUDED: News(
        KubeEvent("ExperimentConcluded"),
        "experiment_concluded",
        "its split stays, guarded, until the spec changes; `graystack experiment` has the report",
    ),
}

HOLDS: dict[Reason, Held] = {
    Reason.PAUSED: Held(None, None),  # told as Paused / paused when it paused
    Reason.COMMAND_MOVED: Held(HOLDING, None),  # routine: not worth a message
    Reason.HOLD_TIME: Held(HOLDING, None),
    Reason.EXPERIMENT_RUNNING: Held(
        HOLDING, None
    ),  # routine, as a stage's hold time: its report is in status
    Reason.INCONCLUSIVE: Held(HOLDING, "stage_holding"),
    Reason.SHADOW_GATE: Held(HOLDING, "stage_holding"),
    Reason.CAPACITY: Held(HOLDING, CAPACITY_NOT_READY),
    Reason.FROZEN_CAPACITY: Held(None, CAPACITY_NOT_READY),  # its Event: its Alert and its pause
    Reason.SPLIT_UNPROVEN: Held(HOLDING, None),  # routine: every change waits for its proofs
    Reason.SPLIT_REFUTED: Held(KubeEvent("SplitNotServed", warning=True), SPLIT_NOT_SERVED),
    Reason.METRICS_ERROR: Held(HOLDING, "stage_holding"),
    Reason.METRICS_ERROR_ESCALATED: Held(HOLDING, "stage_holding"),
    Reason.SHARED_INCIDENT: Held(HOLDING, "stage_holding"),
    Reason.SHARED_INCIDENT_STANDING: Held(HOLDING, "stage_holding"),
    # told by neither: the incident was told, and is told again when it is over (NEWS) or not (STANDING
    # again, the hold remembered, so a quiet spell between two firings tells nothing)
    Reason.SHARED_INCIDENT_CLEARING: Held(None, None),
    Reason.CALLING_WEBHOOKS: Held(HOLDING, "stage_holding"),
    Reason.WEBHOOK_FAILED: Held(KubeEvent("WebhookFailed", warning=True), "stage_holding"),
    Reason.AWAITING_APPROVAL: Held(AWAITING_APPROVAL, "stage_holding"),
    Reason.EVIDENCE_GATE: Held(AWAITING_APPROVAL, "stage_holding"),
}

# graystack_rollout_shared_incidents_total's `result` for the decisions it counts: a held incident begins,
# or is over by itself (held minus cleared: those held now, ended by an operator's resume, or rolled back)
INCIDENT_COUNTS: dict[Reason, str] = {
    Reason.SHARED_INCIDENT: "held",
    Reason.SHARED_INCIDENT_CLEARED: "cleared",
}

UNTOLD = frozenset(
    {
        Reason.FROZEN,  # told by its Alert and its pause
        Reason.GUARD_ONLY,  # nothing advances: nothing to tell
        Reason.RECORDED_ONLY,  # rolled back already
    }
)  # a look that neither moves nor holds: a hold told before it is forgotten
