"""What the admin API shows of the rollout (gateway/rollout/views.py builds it from the controller's
state): the rollout section of GET /v1/status, and of a command's answer.

Pydantic only, so a client parses a status without loading the controller. Extra fields are refused,
on either side: a misspelt field fails where it is made or read, not in front of an operator.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gateway.xds.status import DisconnectedProxy


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HoldStatus(_Answer):
    """The stage's hold: seconds accrued, and needed (None: the stage does not hold)."""

    elapsed: float
    needed: float | None


class CheckStatus(_Answer):
    """One analysis check of the last look (gateway/rollout/analysis.py's Check)."""

    name: str
    verdict: str
    value: float | None
    samples: int
    bound: float | None
    threshold: float
    reason: str
    log_evalue: float | None
    log_bound: float | None
    shared: bool


class DecisionStatus(_Answer):
    """The last look's outcome ("" while it held) and its checks."""

    at: float
    outcome: str
    checks: list[CheckStatus]


class AlertStatus(_Answer):
    at: float
    message: str


class TransitionStatus(_Answer):
    at: float
    source: str
    target: str
    reason: str


class EvidenceStatus(_Answer):
    """What the sequential tests hold: this stage's requests against its need, the error rate's
    anytime bounds, the checks that do not run (`off`: check -> why)."""

    started: float | None
    why_started: str | None
    alpha: float
    tests: list[str]
    off: dict[str, str]
    stage_requests: int
    stage_requests_needed: int | None
    extending: bool
    error_rate_bounds: list[float] | None
    latency_looks_left_out: int
    incident: str | None


class CapacityVariant(_Answer):
    """A variant's replicas, pods and cost; the pod counts only where its Deployment was read, the
    costs only with a GPU-hour price (and output tokens): absent, not null, otherwise."""

    wanted: int
    share: int
    running: int | None = None
    ready: int | None = None
    ready_share: int | None = None
    cost_per_hour: float | None = None
    cost_per_million_tokens: float | None = None


class CapacityStatus(_Answer):
    """The capacity edge's last look (gateway/rollout/capacity.py); the candidate's need for the next
    stage only where the candidate is sized."""

    variants: dict[str, CapacityVariant]
    problems: dict[str, str]
    candidate: str | None = None
    next_stage_needs: int | None = None
    candidate_ready: int | None = None


class NotWorsePart(_Answer):
    """One part of an evidence gate's judgement (gateway/rollout/not_worse.py): ttft, itl or errors."""

    name: str
    log_evalue: float
    samples: int
    shown: bool


class NotWorseStatus(_Answer):
    """An evidence gate's evidence: approved by itself once every part reaches `log_bound`."""

    log_bound: float
    parts: list[NotWorsePart]


class GateStatus(_Answer):
    """The next step's gates (gateway/rollout/gates.py): the step awaiting `approve` (None: none), and
    its webhooks' last answer (None: not called this stage; "" when every one answered 2xx)."""

    step: int
    weight: int | None
    awaiting_approval: bool
    webhook_ok: bool | None
    webhook_reason: str | None
    not_worse: NotWorseStatus | None = None  # an evidence gate's evidence (None: a manual gate)


class DifferenceStatus(_Answer):
    """One difference an experiment reports (gateway/rollout/checks/experiment.py): candidate minus
    baseline (`difference`), over it (`ratio`) or the candidate's share of pairs (`share`: greedy
    agreement, the judge's win rate), its interval valid at every look at once (`upper` null: unbounded
    yet), decided once the interval excludes `null` (0 for a difference, 1 for a ratio)."""

    name: str
    kind: Literal["difference", "ratio", "share"]
    estimate: float | None
    lower: float
    upper: float | None
    samples: list[int]  # the candidate's and the baseline's observations (a share: its pairs, twice)
    decided: bool
    null: float
    ties: int | None = None  # the judge's ties, left out of judge_win_rate


class ExperimentStatus(_Answer):
    """`strategy: experiment`'s report (also GET /v1/experiment): every interval holds together, at
    every look, with probability at least 1 - alpha; `decided`: every serving difference is (the quality
    intervals, beside them where quality is on, are not waited for)."""

    candidate: str
    baseline: str
    alpha: float
    duration: float
    elapsed: float | None  # seconds of its duration held so far (None once it no longer runs)
    end_on_decision: bool
    concluded: bool
    decided: bool
    differences: list[DifferenceStatus]
    not_compared: list[str]
    quality: list[DifferenceStatus] = []
    quality_not_compared: list[str] = []  # each quality interval left out, with why (its check off, no data)
    # Several candidates (gateway/rollout/candidates.py): each one's report; the fields above are the first's.
    candidates: list[ExperimentStatus] = []


class RolloutStatus(_Answer):
    """The rollout controller's view of its rollout."""

    guard: Literal["on", "off"]
    guard_off_reason: str | None
    baseline: str | None
    candidate: str | None
    phase: str
    label: str
    step: int
    steps: int
    weight: int | None
    shadow_percent: int
    paused: bool
    hold: HoldStatus
    errors: int
    reason: str
    rollback_in_flight: bool
    last_rollback_seconds: float | None
    rollback_pending: list[DisconnectedProxy]
    last_decision: DecisionStatus | None
    alerts: list[AlertStatus]
    history: list[TransitionStatus]
    evidence: EvidenceStatus | None
    state_store: str
    state_save_error: str | None
    capacity: CapacityStatus | None
    gate: GateStatus | None = None
    experiment: ExperimentStatus | None = None  # strategy: experiment's report
    # Several candidates (gateway/rollout/lanes.py): each one's lane; the fields above are the first's.
    candidates: list[RolloutStatus] = []
