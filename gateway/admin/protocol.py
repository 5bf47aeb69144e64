"""The admin API's requests and answers, one model each: what a client (graystack/admin_client.py)
sends and reads, and what the gateway takes and sends. /openapi.json documents them.

    GET    /v1/status                         Status
    GET    /v1/experiment                     ExperimentStatus (404 unless strategy: experiment)
    PUT    /v1/weights            SplitChange  FlipResult
    PUT    /v1/faults/{variant}   FaultChange  FaultResult
    DELETE /v1/faults/{variant}                FaultResult
    POST   /v1/rollout/{command}              CommandResult

Each section's model lives beside its builder, on its own floor (gateway/spec/status.py,
gateway/epp/status.py, gateway/notify/status.py, gateway/rollout/status.py, gateway/xds/status.py); this
module composes them and names them all.
Pydantic only, so importing it loads no part of the gateway. Extra fields are refused on both sides.

A few fields exist only sometimes, absent rather than null: the leader fields (Kubernetes mode), the
rollout section's controller fields (a gateway with a controller), parts of the capacity section.
Dump with `exclude_unset=True` to write the JSON the gateway sends.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.epp.status import PickerStatus
from gateway.notify.status import NotificationsStatus, ReceiverStatus
from gateway.rollout.status import (
    AlertStatus,
    CapacityStatus,
    CapacityVariant,
    CheckStatus,
    DecisionStatus,
    DifferenceStatus,
    EvidenceStatus,
    ExperimentStatus,
    GateStatus,
    HoldStatus,
    RolloutStatus,
    TransitionStatus,
)
from gateway.spec.status import (
    FaultStatus,
    LastError,
    MirrorStatus,
    RolloutSplitStatus,
    RoutingStatus,
    RuleStatus,
    SpecFileStatus,
)
from gateway.xds.status import DisconnectedProxy, NackStatus, ProxyStatus, TypeStatus

__all__ = [
    "MAX_FAULT_LATENCY_MS",
    "AlertStatus",
    "CapacityStatus",
    "CapacityVariant",
    "CheckStatus",
    "CohortStatus",
    "CommandResult",
    "DecisionStatus",
    "DifferenceStatus",
    "DisconnectedProxy",
    "EvidenceStatus",
    "ExperimentStatus",
    "FaultChange",
    "FaultResult",
    "FaultStatus",
    "FlipResult",
    "GateStatus",
    "HoldStatus",
    "LastError",
    "MirrorStatus",
    "NackStatus",
    "NotificationsStatus",
    "ProxyStatus",
    "ReceiverStatus",
    "RolloutName",
    "RolloutSection",
    "RolloutSplitStatus",
    "RolloutStatus",
    "RoutingStatus",
    "RuleStatus",
    "SpecFileStatus",
    "SplitChange",
    "Status",
    "TransitionStatus",
    "TypeStatus",
    "XdsStatus",
]


MAX_FAULT_LATENCY_MS = 600_000  # ten minutes: a longer hold on every attempt is a typo, not a test


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SplitChange(_Request):
    """PUT /v1/weights: an operator's flip of the default split or of one segment's."""

    weights: dict[str, int] = Field(
        description="variant -> percent; one variant may be left out for the rest"
    )
    segment: str | None = Field(
        default=None, description="a routing-header value; omit for the default split"
    )
    wait_seconds: float = Field(default=5.0, ge=0, le=60, description="how long to wait for proxies to ACK")


class FaultChange(_Request):
    """PUT /v1/faults/{variant}: errors and latency injected into every attempt on the variant."""

    error_rate: float = Field(default=0.0, ge=0, le=1, description="share of attempts answered `status`")
    status: int = Field(default=503, ge=400, le=599, description="the status an aborted attempt gets")
    latency_ms: int = Field(default=0, ge=0, le=MAX_FAULT_LATENCY_MS, description="added to every attempt")
    wait_seconds: float = Field(default=5.0, ge=0, le=60, description="how long to wait for proxies to ACK")


class XdsStatus(_Answer):
    """The ADS server: connected proxies, and those cut off that still route by their last config."""

    version_prefix: str
    converged: bool
    proxies: list[ProxyStatus]
    disconnected: list[DisconnectedProxy]


class RolloutName(_Answer):
    """The rollout section of a gateway that runs no rollout controller: the live spec's name only."""

    name: str | None


class RolloutSection(RolloutStatus, RolloutName):
    """The rollout section of GET /v1/status: the live spec's name, then the controller's view."""


class CohortStatus(_Answer):
    """Sticky cohorts (`routing.affinity`): its sources in order, the answers to clients measured since the
    gateway started (mirrored copies aside), and how many of them had a key, by source; the others were
    split at random."""

    sources: list[str]
    answers: int
    keyed: dict[str, int]

    @property
    def keyed_share(self) -> float | None:
        return sum(self.keyed.values()) / self.answers if self.answers else None


class MisnamedStatus(_Answer):
    """Answers whose server named itself (`x-graystack-variant`) other than the variant Envoy sent them to,
    since the gateway started: expected where the variants are named otherwise than the servers' forms
    (an A/A run, `v1` and `v2`), else a deployment mix-up (a pod behind the other variant's Service). The
    answers count as the variant Envoy sent them to all the same."""

    variant: str
    named: str
    answers: int


class Status(_Answer):
    """GET /v1/status. The leader fields exist only where several replicas elect a leader."""

    rollout: RolloutSection | RolloutName
    generation: int
    spec: SpecFileStatus
    routing: RoutingStatus | None
    faults: dict[str, FaultStatus]
    xds: XdsStatus
    fault_injection: bool
    cohorts: CohortStatus | None = None  # only where the spec names `routing.affinity` sources
    notifications: NotificationsStatus | None = None  # only where the spec names receivers
    misnamed: list[MisnamedStatus] = []  # servers that named themselves otherwise than their variant
    picker: PickerStatus | None = None  # only where this replica serves a picker (endpoint/envoy_picker)
    leader: bool | None = None
    identity: str | None = None
    leader_identity: str | None = None  # None: no replica holds the Lease right now


class FlipResult(_Answer):
    """PUT /v1/weights: whether every proxy ACKed the flip (and how fast), and the routing it made."""

    acked: bool
    ack_seconds: float | None
    proxies: int
    generation: int
    routing: RoutingStatus | None


class FaultResult(_Answer):
    """PUT and DELETE /v1/faults/{variant}: the variant's fault now (None: cleared), and the ACKs."""

    variant: str
    fault: FaultStatus | None
    acked: bool
    ack_seconds: float | None
    proxies: int
    generation: int


class CommandResult(_Answer):
    """POST /v1/rollout/{command}: applied, or ignored and why; the ACKs; the rollout after it."""

    command: str
    applied: bool
    ignored: str | None
    acked: bool
    proxies: int
    rollout: RolloutStatus
