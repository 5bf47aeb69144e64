"""A gray release as a capacity plan: each variant's replicas from its share of the traffic. Pure.

On a GPU fleet a step that sends 20 % of the traffic to one pod sized for 5 % regresses its latency,
and the guard would roll back a healthy candidate for a capacity mistake. So the variants are sized
from the split: `ceil(share x fleetReplicas)`, within each variant's `minReplicas`/`maxReplicas`
(shares are Fractions of whole percents, so 30 % of 10 is 3, never 4 by a float's error).

Which split: the baseline follows the current one, but keeps the size of any stage it left less than
`scaleDownDelay` ago (30m by default; `recent_weights`), so that after a step, and after promotion, a
rollback lands on pods that are already running (GPU pods take minutes to start); the candidate is
sized for the larger of the current and the next stage's weight (`upcoming_weight`) once the stage's
hold has `warmup` or less to go (`warming`), so
its pods start before the hold ends without idling on GPUs through all of it, and the machine waits
for them to be ready before it advances (`gate`, fed to gateway/rollout/machine.py, always about the
next stage's pods). Mirrored shadow requests are load on the candidate too.

A share is of all the traffic, header segments included (`Segments`): a rule that pins `high_load` to
the candidate sends it that segment's traffic at every stage, and the locustfile's default mix is 20 %
`high_load` and 20 % `mobile`, so at the 5 % step the chart's default rules send the candidate 27 %.
The segments' shares of the traffic are stated (`segments`, percent); a rule without one is sized as
if its traffic followed the default split, and status says so.

The settings arrive as JSON (`--capacity`, GRAYSTACK_CAPACITY; the chart renders `rollout.capacity`),
camelCase as in the chart's values. The Kubernetes side that applies them: gateway/kubernetes/capacity.py.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from gateway.rollout.rollout_state import CapacityGate, Phase, RolloutState
from gateway.rollout.stages import hold_needed
from gateway.spec.fields import Duration
from gateway.spec.model import RolloutSpec, Routing

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
    gpus_per_pod: int = Field(1, ge=0)  # what a pod costs, in GPUs (the chart: variants.<name>.gpu.count)

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
    gpu_hour_price: float = Field(0.0, ge=0)  # per GPU-hour, in the user's currency; 0: no cost shown
    segments: dict[str, int] = {}  # header value -> the percent of all the traffic that carries it
    variants: dict[str, VariantCapacity]

    @model_validator(mode="after")
    def _shares(self) -> CapacitySettings:
        for value, share in self.segments.items():
            if not 0 <= share <= 100:
                raise ValueError(f"segments: {value!r} carries {share}% of the traffic, not 0-100")
        if sum(self.segments.values()) > 100:
            raise ValueError(f"segments: the shares add up to {sum(self.segments.values())}%, over 100")
        return self


class CapacityEdge(Protocol):
    """What scales the variants (gateway/kubernetes/capacity.py); the controller asks it each look."""

    view: dict[str, Any] | None  # the last look (`capacity_view`), for status and the metrics

    def look(self, spec: RolloutSpec, state: RolloutState, routing: Routing, now: float) -> CapacityGate: ...


def parse_settings(text: str) -> CapacitySettings:
    """The settings from their JSON; ValueError (pydantic's) naming the field on anything else."""
    return CapacitySettings.model_validate_json(text)


def replicas_for(percent: Fraction | int, fleet: int, variant: VariantCapacity) -> int:
    """`ceil(percent% x fleet)` within the variant's bounds (exact: a Fraction, never a float)."""
    wanted = max(math.ceil(Fraction(min(percent, 100)) * fleet / 100), variant.min_replicas)
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
    experiment = spec.strategy.experiment if spec.strategy else None
    if experiment is not None and spec.baseline is not None and stage in ("experiment", "concluded"):
        return experiment.candidate_weight(spec.baseline)
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


@dataclass(frozen=True)
class Segments:
    """What the header rules take of the traffic: `rest`, the percent left to the default split, and
    `pinned`, each variant's percent of all the traffic through the rules; `unstated`, rules whose
    share is not stated (sized as if they followed the default split); `unrouted`, stated header
    values no rule routes (their traffic does follow the default split)."""

    rest: Fraction = Fraction(100)
    pinned: Mapping[str, Fraction] = field(default_factory=dict)
    unstated: tuple[str, ...] = ()
    unrouted: tuple[str, ...] = ()

    def share(self, variant: str, default_percent: int) -> Fraction:
        """`variant`'s percent of all the traffic where the default split gives it `default_percent`."""
        return self.rest * default_percent / 100 + self.pinned.get(variant, Fraction(0))

    def note(self) -> str:
        """What status should say about the shares ("" when every rule's share is stated)."""
        notes = [
            f"{value}: no share of the traffic stated, sized as if it followed the default split"
            for value in self.unstated
        ]
        notes += [
            f"{value}: no rule routes it, its share follows the default split" for value in self.unrouted
        ]
        return "; ".join(notes)


def segments(routing: Routing, shares: Mapping[str, int]) -> Segments:
    """The live rules' load, from the stated `shares` of the traffic each header value carries."""
    rules = {rule.value: rule.split() for rule in routing.rules}
    stated = {value: share for value, share in shares.items() if value in rules}
    pinned: dict[str, Fraction] = defaultdict(Fraction)
    for value, share in stated.items():
        for variant, weight in rules[value].items():
            pinned[variant] += Fraction(share * weight, 100)
    unstated = tuple(value for value in rules if value not in shares)
    unrouted = tuple(value for value in shares if value not in rules)
    return Segments(Fraction(100 - sum(stated.values())), dict(pinned), unstated, unrouted)


def targets(
    settings: CapacitySettings,
    split: Mapping[str, int],
    candidate: str,
    upcoming: int,
    shadow_percent: int = 0,
    baseline: str | None = None,
    recent: list[int] | None = None,
    load: Segments = Segments(),
) -> dict[str, int]:
    """Replicas per configured variant: each by its share of the traffic (`load`, with the live default
    `split`); the candidate by the larger of its share (plus the mirrored shadow requests) and its
    share at its `upcoming` weight; the `baseline` by the largest share it had over the `recent`
    candidate weights (the scale-down delay)."""
    wanted = {}
    for name, variant in settings.variants.items():
        percent = load.share(name, split.get(name, 0))
        if name == candidate:
            percent = max(percent + shadow_percent, load.share(name, upcoming))
        elif name == baseline and recent:
            percent = max(percent, load.share(name, 100 - min(recent)))
        wanted[name] = replicas_for(percent, settings.fleet_replicas, variant)
    return wanted


@dataclass(frozen=True)
class CapacityPlan:
    """One look's sizing: the replicas to set now, and the candidate's pods the next stage needs."""

    replicas: dict[str, int]
    candidate_needs: int
    load: Segments = Segments()


def capacity_plan(
    settings: CapacitySettings,
    spec: RolloutSpec,
    state: RolloutState,
    routing: Routing,
    now: float,
    baseline: str,
    candidate: str,
) -> CapacityPlan:
    """`targets` for this look, on the live `routing`: the candidate warmed for the next stage only near
    the end of its hold, the baseline held for the scale-down delay; and the next stage's need, which
    the gate counts."""
    upcoming, shadow = upcoming_weight(spec, state), state.shadow_percent
    warm = warming(spec, state, now, settings.warmup)
    recent = recent_weights(spec, state, now, settings.scale_down_delay)
    load, split = segments(routing, settings.segments), routing.weights
    replicas = targets(settings, split, candidate, upcoming if warm else 0, shadow, baseline, recent, load)
    needs = targets(settings, split, candidate, upcoming, shadow, load=load)
    return CapacityPlan(replicas, needs.get(candidate, 0), load)


def gate(candidate: str, wanted: int, ready: int | None, timeout: float, problem: str = "") -> CapacityGate:
    """Whether `ready` pods of the candidate cover the `wanted` ones; `problem`: why they could not be
    counted (an API error), which holds the stage like pods that are not ready."""
    if problem:
        return CapacityGate(False, f"cannot size or count {candidate}'s pods: {problem}", timeout)
    if ready is not None and ready >= wanted:
        return CapacityGate(True, f"{ready} ready {candidate} pods for {wanted} wanted", timeout)
    return CapacityGate(False, f"waiting for {wanted} ready {candidate} pods, {ready or 0} ready", timeout)


@dataclass(frozen=True)
class Pods:
    """A variant's pods as its Deployment's status counts them."""

    running: int  # `status.replicas`: pods that exist, and hold their GPUs, ready or not
    ready: int  # `status.readyReplicas`


def capacity_view(
    settings: CapacitySettings,
    plan: CapacityPlan,
    pods: Mapping[str, Pods],
    split: Mapping[str, int],
    candidate: str,
    problems: Mapping[str, str],
) -> dict[str, Any]:
    """What status and the metrics show of a look: per variant the replicas set, its pods, the share of
    the traffic it gets and the share its ready pods can take (each pod takes 1/fleetReplicas: after
    a rollback onto a baseline scaled down, how much of the traffic is served well meanwhile), and
    with a GPU-hour price what its running pods cost an hour; the candidate's need for the next stage."""
    variants = {}
    for name, wanted in plan.replicas.items():
        seen = pods.get(name)
        entry: dict[str, float] = {
            "wanted": wanted,
            "share": round(plan.load.share(name, split.get(name, 0))),
        }
        if seen is not None:
            entry |= {"running": seen.running, "ready": seen.ready}
            entry["ready_share"] = min(100, seen.ready * 100 // settings.fleet_replicas)
            if settings.gpu_hour_price:
                gpus = seen.running * settings.variants[name].gpus_per_pod
                entry["cost_per_hour"] = gpus * settings.gpu_hour_price
        variants[name] = entry
    note = plan.load.note()
    notes = {"segments": note} if note else {}
    view = {"variants": variants, "problems": dict(problems) | notes}
    if candidate in plan.replicas:
        ready = pods[candidate].ready if candidate in pods else None
        view |= {"candidate": candidate, "next_stage_needs": plan.candidate_needs, "candidate_ready": ready}
    return view


def per_million_tokens(
    view: dict[str, Any] | None, tokens_per_second: Mapping[str, float]
) -> dict[str, Any] | None:
    """`view` with each priced variant's cost per million output tokens, where it served some:
    the number a GPU bill is judged by (gateway/rollout/throughput.py measures the tokens)."""
    if view is None:
        return None
    variants = {}
    for name, entry in view.get("variants", {}).items():
        rate = tokens_per_second.get(name, 0.0)
        if "cost_per_hour" in entry and rate > 0:
            entry = entry | {"cost_per_million_tokens": entry["cost_per_hour"] / (rate * 3600) * 1e6}
        variants[name] = entry
    return view | {"variants": variants}
