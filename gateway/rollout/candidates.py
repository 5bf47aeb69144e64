"""Several candidates in one rollout (issue 38): a lane for each, and the one split they make. Pure.

Each candidate is rolled out in a lane of its own: the same state machine, looks and tests as a rollout
of one candidate (gateway/rollout/look.py), run on the spec as that candidate sees it (`lane_spec`): the
baseline and itself, its own share at each step, its own share of the error budget. The lanes' splits
are then made into the one the gateway serves (`composed`): each candidate's share as its lane sets it,
the rest to the baseline. So a candidate that fails is rolled back alone, its share returns to the
baseline, and the others go on where they stand.

The budget. A lane's tests are the one-candidate rollout's, each an e-process whose chance of ever firing
on a healthy candidate is at most its share of the lane's budget (Ville's inequality). The lanes split the
rollout's `false_rollback_budget` evenly (budget / k for k candidates), so the chance that any good
candidate is ever rolled back is at most the budget by the union bound, which holds under any dependence
between the lanes: they share the baseline's traffic, and its bad luck is in every lane's comparison
at once. The change detectors, which have a mean time between false alarms rather than a per-rollout
chance, share theirs the same way: each lane's at k times the stated horizon. An experiment's `alpha`
is split so too: every interval of every candidate's report holds together at 1 - alpha.

A lane's comparisons count the requests each variant served (Envoy's counters, the measured answers),
never the weights, so a baseline that also serves the other candidates' remainder changes nothing but
how fast its side fills.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.spec.model import RolloutSpec, validate_spec
from gateway.spec.split import RolloutSplit, to_baseline


def lane_name(rollout: str, candidate: str) -> str:
    """The name a lane goes by (its metrics, alerts, notifications, state file): `<rollout>-<candidate>`."""
    return f"{rollout}-{candidate}"


def lane_spec(spec: RolloutSpec, candidate: str) -> RolloutSpec:
    """The spec as `candidate`'s lane sees it: the baseline and `candidate` alone (every other candidate's
    share, in each split, the baseline's), `candidate`'s share at each step, and its share of the budgets.
    The spec itself where it has one candidate."""
    count = len(spec.candidates)
    if count < 2:
        return spec
    baseline = spec.baseline
    if baseline is None or candidate not in spec.candidates:
        raise ValueError(f"{candidate!r} is not a candidate of rollout {spec.name!r}")
    keep = {baseline, candidate}
    others = [variant for variant in spec.variants if variant not in keep]
    data = spec.model_dump(mode="python")
    data["name"] = lane_name(spec.name, candidate)
    data["variants"] = {name: variant for name, variant in data["variants"].items() if name in keep}
    routing = data["routing"]
    routing["weights"] = to_baseline(spec.routing.weights, others, baseline)
    for rule, projected in zip(spec.routing.rules, routing["rules"], strict=True):
        if rule.variant is not None:
            projected["variant"] = rule.variant if rule.variant in keep else baseline
        else:
            projected["weights"] = to_baseline(rule.split(), others, baseline)
    mirror = spec.routing.mirror
    if mirror is not None and mirror.variant not in keep:
        routing["mirror"] = None
    if spec.retries.fallback is not None and spec.retries.fallback not in keep:
        data["retries"]["fallback"] = None
    strategy = spec.strategy
    if strategy is not None:
        data["strategy"]["steps"] = [
            {**dumped, "weight": step.share(candidate), "weights": {}}
            for step, dumped in zip(strategy.steps, data["strategy"]["steps"], strict=True)
        ]
        if strategy.experiment is not None:
            share = strategy.experiment.weights[candidate]
            data["strategy"]["experiment"]["weights"] = {baseline: 100 - share, candidate: share}
            data["strategy"]["experiment"]["alpha"] = strategy.experiment.alpha / count
    analysis = data["analysis"]
    analysis["false_rollback_budget"] = spec.analysis.false_rollback_budget / count
    analysis["mean_time_between_false_alarms"] = spec.analysis.mean_time_between_false_alarms * count
    return validate_spec(data)


def composed(spec: RolloutSpec, live: Mapping[str, int], lanes: Mapping[str, RolloutSplit]) -> RolloutSplit:
    """The split the lanes make together: each candidate's share as its lane sets it (a lane that leaves
    the split to the spec: its share in `live`, the default split now served), the rest the baseline's.
    A rolled-back lane's candidate is withdrawn from every header segment too; all of them rolled back,
    every segment goes to the baseline, as with one candidate."""
    baseline = spec.baseline
    if baseline is None:
        raise ValueError(f"rollout {spec.name!r} has no baseline to compose its candidates' splits over")
    if all(lane.weights is None and lane.segments_to is None for lane in lanes.values()):
        return RolloutSplit()
    shares = {
        candidate: lane.weights.get(candidate, 0) if lane.weights is not None else live.get(candidate, 0)
        for candidate, lane in lanes.items()
    }
    withdrawn = tuple(candidate for candidate, lane in lanes.items() if lane.segments_to is not None)
    weights = dict.fromkeys(spec.variants, 0) | shares
    weights[baseline] = 100 - sum(shares.values())
    every = len(withdrawn) == len(lanes)
    return RolloutSplit(weights, baseline if every else None, None, () if every else withdrawn)
