"""A gray release as a capacity plan: each variant's replicas from its share of the traffic. Pure.

On a GPU fleet a step that sends 20 % of the traffic to one pod sized for 5 % regresses its latency,
and the guard would roll back a healthy candidate for a capacity mistake. So the variants are sized
from the split: `ceil(share x fleetReplicas)`, within each variant's `minReplicas`/`maxReplicas`
(shares are whole percents, so the arithmetic is exact integers).

Which split: the baseline follows the current one, but keeps the size of any stage it left less than
`scaleDownDelay` ago (30m by default; `recent_weights`), so that after a step, and after promotion, a
rollback lands on pods that are already running (GPU pods take minutes to start); the candidate is sized for the larger of the current and the next
stage's weight (`upcoming_weight`) once the stage's hold has `warmup` or less to go (`warming`), so
its pods start before the hold ends without idling on GPUs through all of it, and the machine waits
for them to be ready before it advances (`gate`, fed to gateway/rollout/machine.py, always about the
next stage's pods). Mirrored shadow requests are load on the candidate too. Only the default split counts: header rules that send a
segment to one variant are not sized for (their share of the traffic is not known here).

The settings arrive as JSON (`--capacity`, GRAYSTACK_CAPACITY; the chart renders `rollout.capacity`),
camelCase as in the chart's values. The Kubernetes side that applies them: gateway/kubernetes/capacity.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from gateway.rollout.rollout_state import CapacityGate, Phase, RolloutState
from gateway.rollout.spec import RolloutSpec
from gateway.rollout.spec_fields import Duration
from gateway.rollout.views import hold_needed

READY_TIMEOUT = 600.0  # seconds a stage waits for the candidate's pods by default (10m)
SCALE_DOWN_DELAY = 1800.0  # seconds the baseline keeps the size of a stage it left (30m): a warm rollback
WARMUP = 300.0  # seconds before a hold ends that the candidate is scaled for the next stage (5m)


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class VariantCapacity(_Settings):
    """One variant's Deployment, its bounds, and the HPA whose minReplicas is set instead, if any."""

    deployment: str = Field(min_length=1)
    min_replicas: int = Field(1, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    hpa: str = ""  # "": no HPA; the Deployment's replicas are set through its scale subresource

    @model_validator(mode="after")
    def _bounds(self) -> VariantCapacity:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(f"maxReplicas {self.max_replicas} is below minReplicas {self.min_replicas}")
        return self


class CapacitySettings(_Settings):
    fleet_replicas: int = Field(ge=1)  # the replicas the whole traffic needs
    ready_timeout: Duration = READY_TIMEOUT
    warmup: Duration = WARMUP
    scale_down_delay: Duration = SCALE_DOWN_DELAY
    variants: dict[str, VariantCapacity]


class CapacityEdge(Protocol):
    """What scales the variants (gateway/kubernetes/capacity.py); the controller asks it each look."""

    view: dict | None  # the last look (wanted replicas, the candidate's ready pods), for status

    def look(
        self, spec: RolloutSpec, state: RolloutState, split: Mapping[str, int], now: float
    ) -> CapacityGate: ...


def parse_settings(text: str) -> CapacitySettings:
    """The settings from their JSON; ValueError (pydantic's) naming the field on anything else."""
    return CapacitySettings.model_validate_json(text)


def replicas_for(percent: int, fleet: int, variant: VariantCapacity) -> int:
    """`ceil(percent% x fleet)` within the variant's bounds."""
    wanted = max(-(-min(percent, 100) * fleet // 100), variant.min_replicas)
    return wanted if variant.max_replicas is None else min(wanted, variant.max_replicas)


def upcoming_weight(spec: RolloutSpec, state: RolloutState) -> int:
    """The candidate's weight at the next stage; its current one where nothing advances."""
    strategy = spec.strategy
    if state.weight is None or strategy is None:
        return state.weight or 0
    if state.phase == Phase.SHADOW:
        return strategy.steps[0].weight
    if state.phase == Phase.PROGRESSING and state.step + 1 < len(strategy.steps):
        return strategy.steps[state.step + 1].weight
    return state.weight


def _stage_weight(spec: RolloutSpec, label: str) -> int | None:
    """The candidate's weight in the stage a transition names (`step 1`, `promoted`...); None: manual."""
    stage = label.removesuffix(" (paused)")
    steps = spec.strategy.steps if spec.strategy else []
    if stage.startswith("step ") and stage[5:].isdigit() and int(stage[5:]) < len(steps):
        return steps[int(stage[5:])].weight
    return {"shadow": 0, "rolled_back": 0, "promoted": 100}.get(stage)


def recent_weights(spec: RolloutSpec, state: RolloutState, now: float, window: float) -> list[int]:
    """The candidate's weights over the last `window` seconds: the current one, and those of the stages
    left within the window (the baseline keeps their size: a rollback then lands on warm pods)."""
    left = [_stage_weight(spec, t.source) for t in state.history if now - t.at <= window]
    return [state.weight or 0, *(weight for weight in left if weight is not None)]


def warming(spec: RolloutSpec, state: RolloutState, now: float, warmup: float) -> bool:
    """Whether the stage's hold has `warmup` seconds or less to go: time to start the next stage's pods."""
    needed = hold_needed(spec, state)
    return needed is not None and needed - state.hold_elapsed(now) <= warmup


def targets(
    settings: CapacitySettings,
    split: Mapping[str, int],
    candidate: str,
    upcoming: int,
    shadow_percent: int = 0,
    baseline: str | None = None,
    recent: list[int] | None = None,
) -> dict[str, int]:
    """Replicas per configured variant: each by its share of the live default `split`; the candidate
    by the larger of its share (plus the mirrored shadow requests) and its `upcoming` weight; the
    `baseline` by the largest share it had over the `recent` candidate weights (the scale-down delay)."""
    wanted = {}
    for name, variant in settings.variants.items():
        percent = split.get(name, 0)
        if name == candidate:
            percent = max(percent + shadow_percent, upcoming)
        elif name == baseline and recent:
            percent = max(percent, 100 - min(recent))
        wanted[name] = replicas_for(percent, settings.fleet_replicas, variant)
    return wanted


@dataclass(frozen=True)
class CapacityPlan:
    """One look's sizing: the replicas to set now, and the candidate's pods the next stage needs."""

    replicas: dict[str, int]
    candidate_needs: int


def capacity_plan(
    settings: CapacitySettings,
    spec: RolloutSpec,
    state: RolloutState,
    split: Mapping[str, int],
    now: float,
    baseline: str,
    candidate: str,
) -> CapacityPlan:
    """`targets` for this look: the candidate warmed for the next stage only near the end of its hold,
    the baseline held for the scale-down delay; and the next stage's need, which the gate counts."""
    upcoming, shadow = upcoming_weight(spec, state), state.shadow_percent
    warm = warming(spec, state, now, settings.warmup)
    recent = recent_weights(spec, state, now, settings.scale_down_delay)
    replicas = targets(settings, split, candidate, upcoming if warm else 0, shadow, baseline, recent)
    needs = targets(settings, split, candidate, upcoming, shadow)
    return CapacityPlan(replicas, needs.get(candidate, 0))


def gate(candidate: str, wanted: int, ready: int | None, timeout: float, problem: str = "") -> CapacityGate:
    """Whether `ready` pods of the candidate cover the `wanted` ones; `problem`: why they could not be
    counted (an API error), which holds the stage like pods that are not ready."""
    if problem:
        return CapacityGate(False, f"cannot size or count {candidate}'s pods: {problem}", timeout)
    if ready is not None and ready >= wanted:
        return CapacityGate(True, f"{ready} ready {candidate} pods for {wanted} wanted", timeout)
    return CapacityGate(False, f"waiting for {wanted} ready {candidate} pods, {ready or 0} ready", timeout)
