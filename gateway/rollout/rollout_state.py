"""The rollout's state and what the state machine (gateway/rollout/machine.py) asks of the controller:
plain frozen data, saved as JSON (`to_dict`/`from_dict`, type-checked on the way back in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter

from gateway.rollout.analysis import Check
from gateway.rollout.evidence import Evidence
from gateway.rollout.outcome import Outcome


class Phase(StrEnum):
    SHADOW = "shadow"
    PROGRESSING = "progressing"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    MANUAL = "manual"
    EXPERIMENT = "experiment"  # strategy: experiment holds its split (its duration accrues as a hold)
    CONCLUDED = "concluded"  # ... and after it: the split stays, only the guard runs


# the phases that pause/promote apply to
ADVANCING = frozenset({Phase.SHADOW, Phase.PROGRESSING, Phase.EXPERIMENT})


class Command(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    RETRY = "retry"
    APPROVE = "approve"  # lets a step waiting on `approval: manual` go (gateway/rollout/gates.py)


@dataclass(frozen=True)
class CapacityGate:
    """Whether the candidate's pods for the next weight are ready (the controller's look), and why not."""

    ready: bool
    reason: str
    timeout: float  # seconds a stage waits for them before it freezes with an alert


CONTROL_PLANE = "control plane"  # the proofs a SplitGate waits on
DATA_PLANE = "data plane"


@dataclass(frozen=True)
class SplitGate:
    """Whether the split last written to the user's Gateway API gateway is proven served (issue 36): the
    control plane's proof (every parent Gateway Accepted it at the written generation) and then the data
    plane's (the answers' own split, gateway/rollout/sequential/split.py). `waiting_on`: the proof that
    does not hold yet (None: both hold); `refuted`: the data plane serves another split than asked;
    `asked`: the default split proven (or awaited); `reason`: which proof, with its counts."""

    waiting_on: str | None
    refuted: bool
    asked: Mapping[str, int]
    reason: str

    @property
    def proven(self) -> bool:
        return self.waiting_on is None


@dataclass(frozen=True)
class WebhookOutcome:
    """What a step's webhooks answered (the controller calls them; gateway/rollout/webhooks.py): fed
    back into the machine, kept in the state for the stage, so a failure is retried after a pause."""

    step: int  # the step they stand before
    ok: bool
    reason: str  # the failing URL, its status (or error) and the start of its body; "" when ok
    rollback: bool  # a failing webhook's on_failure is rollback
    at: float


@dataclass(frozen=True)
class Transition:
    at: float
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class IncidentWatch:
    """How a held shared incident is watched for its end (gateway/rollout/incident.py): when its current
    tests and its quiet period began, and whether its hold paused the rollout (an operator's own pause is
    theirs to lift)."""

    tests_since: float
    quiet_since: float
    paused: bool


@dataclass(frozen=True)
class RolloutState:
    phase: Phase
    step: int = 0  # index into strategy.steps while progressing
    weight: int | None = 0  # the candidate's share of the default split; None: the spec's own (manual)
    shadow_percent: int = 0  # share of requests mirrored to zero-layer; 0 = off
    paused: bool = False
    held: float = 0.0  # hold time accrued in the current stage up to `held_until`
    held_until: float | None = None  # the clock reading `held` counts up to; None while not accruing
    errors: int = 0  # consecutive analysis intervals with an ERROR verdict
    rollback_started: float | None = None  # first failing sample of a rollback not yet ACKed everywhere
    reason: str = ""  # why the last transition happened
    history: tuple[Transition, ...] = ()
    evidence: Evidence | None = None  # the sequential tests (gateway/rollout/evidence.py); None: start anew
    incident: str | None = None  # a shared incident held under on_shared_incident: hold, until it is over
    incident_watch: IncidentWatch | None = None  # None: none held, or held by a gateway that did not watch
    capacity_since: float | None = None  # when this stage began waiting for the candidate's pods
    awaiting: int | None = None  # the step waiting for `approve` (its manual gate is all that holds it)
    webhook: WebhookOutcome | None = None  # the next step's webhooks' last answer, this stage

    def hold_elapsed(self, now: float) -> float:
        """Hold time accrued by `now`; a clock behind `held_until` adds nothing."""
        if self.held_until is None:
            return self.held
        return self.held + max(0.0, now - self.held_until)

    def label(self) -> str:
        where = f"step {self.step}" if self.phase == Phase.PROGRESSING else self.phase.value
        return f"{where} (paused)" if self.paused else where

    def to_dict(self) -> dict[str, Any]:
        data = _STATE.dump_python(
            self
        )  # python mode: -inf (an SR statistic before data) survives as -Infinity
        data["phase"] = self.phase.value
        for optional in ("capacity_since", "awaiting", "webhook", "incident_watch"):
            if data[optional] is None:  # the stored text stays what gateways without these read
                del data[optional]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutState:
        """The inverse of `to_dict`, type-checked; ValueError (pydantic's included) on anything else."""
        if not isinstance(data, Mapping):
            raise ValueError("a rollout state is a mapping")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown rollout state field(s) {unknown}")
        return _STATE.validate_python(dict(data))


_STATE = TypeAdapter(RolloutState)


@dataclass(frozen=True)
class Alert:
    message: str


@dataclass(frozen=True)
class RecordDecision:
    """One analysis interval: the checks (value, samples, bound, threshold each) and what it led to
    (typed, for the readers that tell it; its `sentence` for people)."""

    checks: tuple[Check, ...]
    outcome: Outcome


@dataclass(frozen=True)
class Ignored:
    command: Command
    reason: str


@dataclass(frozen=True)
class RolledBack:
    """The rollout rolled back in this call; `reason` is graystack_rollout_rollbacks_total's label: the
    first failing check's name, `shared_incident`, `operator` or `metrics_error`."""

    reason: str


@dataclass(frozen=True)
class CallWebhooks:
    """Call step `step`'s webhooks and feed the answer to the next look (`WebhookOutcome`)."""

    step: int


Action = Alert | RecordDecision | Ignored | RolledBack | CallWebhooks
