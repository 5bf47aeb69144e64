"""A week's rollout on a GPU fleet, simulated with the real code: GPU pod-hours with capacity following the
split (`rollout.capacity`) against both fleets kept at full size, and the share of time any variant ran
above its ready capacity.

The rollout is the pure state machine (gateway/rollout/machine.py) with every check passing, looked at
once a minute on a fake clock; the replicas are gateway/rollout/capacity.py's `capacity_plan` and `gate`,
as the Kubernetes edge applies them. What is simulated: the traffic (a daily cycle
between --trough and 1.0 of the peak, which --fleet pods serve at full load) and the pods (a new pod is
ready --pod-start minutes after it is asked for; a removed one goes at once). Three plans side by side:
  follow    capacity on: each variant scaled from its share, the step waiting for the candidate's pods
  full      both fleets at full size all week (what the chart does without capacity: the rollout
            doubles the GPU bill)
  fixed     the baseline at full size and the candidate at the chart's default 1 pod, the steps not
            waiting: how often the candidate runs above what its pods can serve
Then the same week with the locustfile's default mix (60 % no header, 20 % `mobile`, 20 % `high_load`)
on the chart's default rules (`high_load` pinned to zero-layer, `mobile` split 80/20), where the
candidate's load is not its default-split weight:
  mix-stated    capacity on, `segments` stating the mix (the chart's default)
  mix-unstated  capacity on, no `segments`: sized from the default split alone
Writes bench/results/capacity_week.json.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from bench._common import write_result
from gateway.rollout.analysis import Check, Verdict
from gateway.rollout.capacity import CapacitySettings, VariantCapacity, capacity_plan, gate, segments
from gateway.rollout.machine import initial_state, step
from gateway.rollout.plan import CHECK_NAMES
from gateway.rollout.rollout_state import Phase, RolloutState
from gateway.spec.model import RolloutSpec, Routing, validate_spec

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
STEPS = [
    {"weight": 5, "hold": "1d"},
    {"weight": 20, "hold": "2d"},
    {"weight": 50, "hold": "2d"},
    {"weight": 100},
]
VARIANTS = ("baseline", "zero-layer")
PLANS = ("follow", "full", "fixed", "mix-stated", "mix-unstated")
MIX = {"high_load": 20, "mobile": 20}  # the locustfile's default mix, -=6,mobile=2,high_load=2
RULES: list[dict[str, Any]] = [  # the chart's default header rules
    {"value": "high_load", "variant": "zero-layer"},
    {"value": "mobile", "weights": {"baseline": 80, "zero-layer": 20}},
]


def rollout_spec(rules: list[dict[str, Any]]) -> RolloutSpec:
    return validate_spec(
        {
            "name": "zero-layer",
            "variants": {v: {"endpoints": [f"10.0.0.{i}:8000"]} for i, v in enumerate(VARIANTS, start=1)},
            "routing": {"weights": {"baseline": 100, "zero-layer": 0}, "rules": rules},
            "retries": {"fallback": "baseline"},
            "strategy": {"steps": STEPS},
        }
    )


def routing_at(spec: RolloutSpec, state: RolloutState) -> Routing:
    """The spec's routing with the default split the machine's state sets."""
    weight = state.weight or 0
    return spec.routing.model_copy(update={"weights": {"baseline": 100 - weight, "zero-layer": weight}})


def passing() -> list[Check]:
    """One look with every check passing (a healthy candidate: the week is about capacity)."""
    return [Check(name, Verdict.PASS, 0.0, 5000, None, 1.0, "pass") for name in CHECK_NAMES]


def demand(now: float, trough: float) -> float:
    """The traffic as a share of the peak: a daily cycle, highest at 18:00."""
    return trough + (1 - trough) * 0.5 * (1 + math.cos(2 * math.pi * (now / DAY - 0.75)))


class Pods:
    """A variant's pods: asked-for replicas become ready `start` seconds later; removals are immediate."""

    def __init__(self, replicas: int, start: float) -> None:
        self.start = start
        self.ready = replicas
        self.pending: list[float] = []  # when each pod asked for becomes ready

    def scale(self, replicas: int, now: float) -> None:
        wanted_new = replicas - self.ready - len(self.pending)
        if wanted_new > 0:
            self.pending += [now + self.start] * wanted_new
        elif wanted_new < 0:
            drop = -wanted_new
            cut = min(drop, len(self.pending))
            self.pending = self.pending[: len(self.pending) - cut]
            self.ready -= drop - cut

    def tick(self, now: float) -> None:
        self.ready += sum(1 for at in self.pending if at <= now)
        self.pending = [at for at in self.pending if at > now]

    @property
    def running(self) -> int:
        return self.ready + len(self.pending)  # a starting pod holds its GPU too


def simulate(plan: str, fleet: int, trough: float, pod_start: float, days: float) -> dict[str, Any]:
    mixed = plan.startswith("mix-")
    spec = rollout_spec(RULES if mixed else [])
    settings = CapacitySettings(
        fleet_replicas=fleet,
        segments=MIX if plan == "mix-stated" else {},
        variants={v: VariantCapacity(deployment=v, min_replicas=1) for v in VARIANTS},
    )
    traffic = segments(spec.routing, MIX if mixed else {})  # what the users send, stated or not
    state = initial_state(spec, 0.0)
    start = {"baseline": fleet, "zero-layer": fleet if plan == "full" else 1}
    following = plan not in ("full", "fixed")
    if following:  # the rollout begins on a fleet already sized for its first stage
        start = capacity_plan(settings, spec, state, routing_at(spec, state), 0.0, *VARIANTS).replicas
    pods = {name: Pods(replicas, pod_start) for name, replicas in start.items()}
    pod_hours = 0.0
    over = {v: 0.0 for v in VARIANTS}
    promoted_at = None
    now = 0.0
    while now < days * DAY:
        for variant in pods.values():
            variant.tick(now)
        routing = routing_at(spec, state)
        capacity = None
        if following:
            sizing = capacity_plan(settings, spec, state, routing, now, *VARIANTS)
            for name, replicas in sizing.replicas.items():
                pods[name].scale(replicas, now)
            capacity = gate(
                "zero-layer", sizing.candidate_needs, pods["zero-layer"].ready, settings.ready_timeout
            )
        state, _ = step(spec, state, passing(), None, now, capacity)
        if state.phase == Phase.PROMOTED and promoted_at is None:
            promoted_at = now
        load = demand(now, trough) * fleet  # in pods' worth of traffic
        for name in VARIANTS:
            share = traffic.share(name, routing.weights[name]) / 100
            if load * share > pods[name].ready + 1e-9:
                over[name] += MINUTE
        pod_hours += sum(variant.running for variant in pods.values()) * MINUTE / HOUR
        now += MINUTE
    return {
        "pod_hours": round(pod_hours, 1),
        "over_capacity_share": {name: round(seconds / (days * DAY), 5) for name, seconds in over.items()},
        "promoted_after_days": None if promoted_at is None else round(promoted_at / DAY, 3),
        "final": {name: variant.running for name, variant in pods.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=int, default=8, help="pods the whole traffic needs at its peak")
    parser.add_argument("--trough", type=float, default=0.3, help="the daily low, as a share of the peak")
    parser.add_argument(
        "--pod-start", type=float, default=6.0, help="minutes a new GPU pod takes to be ready"
    )
    parser.add_argument("--days", type=float, default=7.0)
    args = parser.parse_args()
    results = {
        plan: simulate(plan, args.fleet, args.trough, args.pod_start * MINUTE, args.days) for plan in PLANS
    }
    saving = 1 - results["follow"]["pod_hours"] / results["full"]["pod_hours"]
    results["saving_vs_full"] = round(saving, 4)
    for plan in PLANS:
        print(f"{plan:7} {results[plan]}")
    print(f"capacity following the split saves {saving:.1%} of the GPU pod-hours of both fleets at full size")
    parameters = {
        "steps": STEPS,
        "fleet": args.fleet,
        "trough": args.trough,
        "pod_start_minutes": args.pod_start,
        "days": args.days,
        "look_seconds": MINUTE,
        "mix": {"segments": MIX, "rules": RULES},
        "capacity_defaults": {"warmup_s": 300, "ready_timeout_s": 600, "scale_down_delay_s": 1800},
    }
    print(write_result("capacity_week", parameters, results))


if __name__ == "__main__":
    main()
