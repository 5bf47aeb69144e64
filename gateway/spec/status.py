"""What the admin API shows of the gateway's spec: the file, the live routing and the injected faults
(gateway/service.py builds it).

Pydantic only, so a client parses a status without loading the gateway. Extra fields are refused, on
either side: a misspelt field fails where it is made or read, not in front of an operator.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LastError(_Answer):
    """Why the last spec was refused (the last good one stays live)."""

    message: str
    at: float


class SpecFileStatus(_Answer):
    path: str
    sha256: str | None
    loaded_at: float | None
    last_error: LastError | None


class RuleStatus(_Answer):
    """A header segment's split."""

    value: str
    weights: dict[str, int]


class MirrorStatus(_Answer):
    variant: str
    percent: int


class RolloutSplitStatus(_Answer):
    """The rollout controller's layer of the split (gateway/spec/split.py)."""

    weights: dict[str, int] | None
    segments_to: str | None


class RoutingStatus(_Answer):
    """The live routing; `flipped`: the segments an operator flipped ("default" for the default split)."""

    header: str
    weights: dict[str, int]
    rules: list[RuleStatus]
    flipped: list[str]
    fallback: str | None
    mirror: MirrorStatus | None
    rollout_split: RolloutSplitStatus


class FaultStatus(_Answer):
    """A fault injected into every attempt on a variant."""

    error_rate: float
    status: int
    latency_ms: int
    summary: str


class GatewayStatus(_Answer):
    """The live spec's part of GET /v1/status: `rollout` is its name."""

    rollout: str | None
    generation: int
    spec: SpecFileStatus
    routing: RoutingStatus | None
    faults: dict[str, FaultStatus]
