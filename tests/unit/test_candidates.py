"""Several candidates in one rollout (issue 38): the spec refuses what cannot run with the field named;
each candidate's lane sees the baseline and itself with its share of the budget; the lanes' splits make
one; and, driven by the real controllers over the real Gateway (a fake clock and counting providers),
a candidate that fails is rolled back alone while the others go on."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gateway.app import GatewayOptions, GatewayProcess
from gateway.errors import Refused
from gateway.local import local_parts
from gateway.rollout.candidates import composed, lane_spec
from gateway.rollout.lanes import Lanes
from gateway.rollout.plan import plan_for
from gateway.rollout.rollout_state import Command
from gateway.rollout.state_store import FileStateStore
from gateway.service import Gateway
from gateway.spec.model import SpecError, parse_spec, validate_spec
from gateway.spec.split import RolloutSplit
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import AdsServer
from graystack.local.processes import free_port
from tests.support.ads_client import node
from tests.support.clock import FakeClock
from tests.support.counting_provider import CountingProvider, Traffic

# variants named otherwise than the servers and than graystack's own names
THREE = """
name: tune
variants:
  control:  {endpoints: ["127.0.0.1:8001"]}
  lora-a:   {endpoints: ["127.0.0.1:8002"]}
  lora-b:   {endpoints: ["127.0.0.1:8003"]}
routing:
  header: X-Client-Type
  rules:
    - {value: beta, variant: lora-b}
    - {value: mobile, weights: {control: 60, lora-a: 20, lora-b: 20}}
  weights: {control: 100}
retries: {fallback: control}
strategy:
  steps: [{weight: 5, hold: 1m}, {weight: 20, hold: 1m, weights: {lora-b: 10}}, {weight: 40}]
analysis: {interval: 5s, max_latency_ratio: null, max_ttft_p95: null, expected_weight_status: null}
"""


def three(**changes: Any) -> dict[str, Any]:
    data = parse_spec(THREE).model_dump(mode="json")
    data.update(changes)
    return data


def one_candidate() -> dict[str, Any]:
    """THREE without lora-b: a rollout of lora-a alone."""
    data = three(
        strategy={"steps": [{"weight": 5, "hold": "1m"}, {"weight": 20, "hold": "1m"}, {"weight": 40}]}
    )
    del data["variants"]["lora-b"]
    data["routing"]["rules"] = [{"value": "mobile", "weights": {"control": 80, "lora-a": 20}}]
    return data


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"strategy": {"steps": [{"weight": 5}, {"weight": 60}]}},
         "strategy.steps: the candidates' largest shares sum to 120 % (lora-a 60, lora-b 60)"),
        ({"strategy": {"steps": [{"weight": 5, "weights": {"control": 10}}]}},
         "strategy.steps.0.weights: ['control'] are not candidates"),
        ({"strategy": {"experiment": {"weights": {"control": 50, "lora-a": 50}, "duration": "1h"}}},
         "strategy.experiment.weights: give every candidate a share above 0 (['lora-b'] have none)"),
        ({"strategy": {"shadow": {"percent": 10}, "steps": [{"weight": 5}]}}, "strategy.shadow: a shadow stage"),
        ({"variants": {"control": {"endpoints": ["127.0.0.1:8001"]}, "lora-a": {"endpoints": ["127.0.0.1:8002"]},
                       "lora-b": {"endpoints": ["127.0.0.1:8002"]}}},
         "variants.lora-b.endpoints: the same as variants.lora-a's"),
    ],
)  # fmt: skip
def test_several_candidates_that_cannot_each_run_a_lane_are_refused_with_the_field_named(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(SpecError) as refused:
        validate_spec(three(**change))
    assert field in str(refused.value)


def test_an_experiment_without_a_baseline_and_a_candidate_named_twice_are_refused() -> None:
    no_baseline = three(
        retries={"fallback": None},
        strategy={"experiment": {"weights": {"control": 34, "lora-a": 33, "lora-b": 33}, "duration": "1h"}},
    )
    with pytest.raises(
        SpecError, match=r"strategy\.experiment\.weights: an experiment compares with a baseline"
    ):
        validate_spec(no_baseline)
    twice = THREE.replace(
        'lora-b:   {endpoints: ["127.0.0.1:8003"]}', 'lora-a:   {endpoints: ["127.0.0.1:8003"]}'
    )
    with pytest.raises(SpecError, match=r"not valid YAML at line 6, column 3: 'lora-a' is given twice"):
        parse_spec(twice)


def test_a_lane_sees_the_baseline_and_its_candidate_with_its_own_shares_and_its_share_of_the_budget() -> None:
    spec = parse_spec(THREE)
    assert spec.lanes == ("lora-a", "lora-b")
    lane = lane_spec(spec, "lora-b")
    assert lane.name == "tune-lora-b"
    assert list(lane.variants) == ["control", "lora-b"]
    assert [step.weight for step in lane.strategy.steps] == [5, 10, 40]  # its own share at step 2
    assert lane.routing.segment("beta") == {"lora-b": 100}
    assert lane.routing.segment("mobile") == {"control": 80, "lora-b": 20}  # lora-a's share is the baseline's
    assert lane_spec(spec, "lora-a").routing.segment("beta") == {"control": 100}
    assert lane.analysis.false_rollback_budget == spec.analysis.false_rollback_budget / 2
    assert lane.analysis.mean_time_between_false_alarms == spec.analysis.mean_time_between_false_alarms * 2
    plan, alone = plan_for(lane), plan_for(validate_spec(one_candidate()))
    assert plan.tests == alone.tests
    assert plan.alpha == pytest.approx(alone.alpha / 2)  # Bonferroni over the candidates


def test_the_lanes_splits_make_one_and_a_rolled_back_lane_is_withdrawn_alone() -> None:
    spec = parse_spec(THREE)
    lanes = {
        "lora-a": RolloutSplit({"control": 80, "lora-a": 20}),
        "lora-b": RolloutSplit({"control": 90, "lora-b": 10}),
    }
    assert composed(spec, {}, lanes).weights == {"control": 70, "lora-a": 20, "lora-b": 10}
    lanes["lora-a"] = RolloutSplit({"control": 100, "lora-a": 0}, segments_to="control")
    both = composed(spec, {}, lanes)
    assert (both.weights, both.segments_to, both.withdrawn) == (
        {"control": 90, "lora-a": 0, "lora-b": 10},
        None,
        ("lora-a",),
    )
    lanes["lora-b"] = RolloutSplit({"control": 100, "lora-b": 0}, segments_to="control")
    assert composed(spec, {}, lanes).segments_to == "control"
    assert composed(spec, {}, {"lora-a": RolloutSplit(), "lora-b": RolloutSplit()}) == RolloutSplit()


def live_split(gateway: Gateway) -> dict[str, dict[str, int]]:
    routing = gateway.live.routing
    return {"default": dict(routing.weights), **{rule.value: rule.split() for rule in routing.rules}}


async def test_a_failing_candidate_is_rolled_back_alone_and_the_other_goes_on(tmp_path: Path) -> None:
    clock = FakeClock()
    gateway = Gateway(SnapshotCache(), tmp_path / "spec.yaml", clock=clock)
    gateway.load(parse_spec(THREE), "sha-1")
    gateway.on_connect("envoy", node("envoy"))
    traffic = {"control": Traffic(5000), "lora-a": Traffic(5000), "lora-b": Traffic(5000)}
    lanes = Lanes(
        gateway,
        gateway.lanes,
        AdsServer(gateway.cache),
        lambda spec: CountingProvider(traffic, weight_status={}),  # each lane reads the counters itself
        lambda lane: FileStateStore(tmp_path / f"{lane}.json"),
        clock=clock,
    )
    lanes.restore()
    assert live_split(gateway)["default"] == {"control": 90, "lora-a": 5, "lora-b": 5}
    for _ in range(20):  # past step 1's hold on healthy traffic: both lanes step to their own step 2 shares
        clock.now += 5
        for controller in lanes.controllers.values():
            await controller.tick()
    assert live_split(gateway)["default"] == {"control": 70, "lora-a": 20, "lora-b": 10}
    traffic["lora-a"] = Traffic(5000, 500)
    for _ in range(3):
        clock.now += 5
        for controller in lanes.controllers.values():
            await controller.tick()
    status = lanes.status()
    phases = {lane.candidate: (lane.phase, lane.weight) for lane in status.candidates}
    assert phases == {"lora-a": ("rolled_back", 0), "lora-b": ("progressing", 10)}
    assert live_split(gateway) == {
        "default": {"control": 90, "lora-a": 0, "lora-b": 10},
        "beta": {"lora-b": 100},  # lora-b's segment stays its own
        "mobile": {"control": 80, "lora-b": 20},  # lora-a's share of it returns to the baseline
    }
    assert await lanes.command(Command.PROMOTE, "lora-c") == (
        "no candidate 'lora-c' in this rollout (candidates: lora-a, lora-b)"
    )
    assert await lanes.command(Command.PROMOTE) is None  # lora-a's lane ignores it; lora-b's takes it
    assert lanes.status().candidates[1].weight == 40
    assert live_split(gateway)["default"] == {"control": 60, "lora-a": 0, "lora-b": 40}
    assert [lane.state_store for lane in lanes.status().candidates] == [
        str(tmp_path / "tune-lora-a.json"),
        str(tmp_path / "tune-lora-b.json"),
    ]


def test_the_gateway_refuses_an_edit_that_changes_the_candidates_the_lanes_run(tmp_path: Path) -> None:
    gateway = Gateway(SnapshotCache(), tmp_path / "spec.yaml")
    gateway.load(parse_spec(THREE), "sha-1")
    gateway.load(validate_spec(one_candidate()), "sha-2")
    assert gateway.last_error is not None
    assert (
        "variants: the rollout runs a lane for each of the candidates ['lora-a', 'lora-b']"
        in (gateway.last_error["message"])
    )
    assert list(gateway.spec.variants) == ["control", "lora-a", "lora-b"]  # the last good spec stays


async def test_an_experiment_of_three_holds_its_split_and_reports_each_candidate_at_a_share_of_alpha(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    experiment = {"weights": {"control": 34, "lora-a": 33, "lora-b": 33}, "duration": "1h", "alpha": 0.05}
    data = three(strategy={"experiment": experiment})
    data["routing"]["rules"] = []
    gateway = Gateway(SnapshotCache(), tmp_path / "spec.yaml", clock=clock)
    gateway.load(validate_spec(data), "sha-1")
    gateway.on_connect("envoy", node("envoy"))
    traffic = {"control": Traffic(300), "lora-a": Traffic(300, ttft=0.08), "lora-b": Traffic(300)}
    lanes = Lanes(
        gateway,
        gateway.lanes,
        AdsServer(gateway.cache),
        lambda spec: CountingProvider(traffic, weight_status={}),
        lambda lane: FileStateStore(tmp_path / f"{lane}.json"),
        clock=clock,
    )
    lanes.restore()
    for _ in range(5):
        clock.now += 5
        for controller in lanes.controllers.values():
            await controller.tick()
    assert live_split(gateway)["default"] == {"control": 34, "lora-a": 33, "lora-b": 33}
    reports = [lane.experiment for lane in lanes.status().candidates]
    assert [(r.candidate, r.baseline, r.alpha) for r in reports if r is not None] == [
        ("lora-a", "control", 0.025),
        ("lora-b", "control", 0.025),
    ]
    ttft = {
        r.candidate: next(d for d in r.differences if d.name == "ttft_p50") for r in reports if r is not None
    }
    assert ttft["lora-a"].estimate == pytest.approx(1.6, rel=0.03)
    assert ttft["lora-a"].lower > 1
    assert ttft["lora-b"].estimate == pytest.approx(1.0, rel=0.03)


def test_a_mode_that_keeps_one_rollout_state_refuses_several_candidates_at_start(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(THREE)
    options = GatewayOptions(spec=spec_file, xds_port=free_port(), admin_port=free_port())
    one_state = dataclasses.replace(local_parts(options), lane_store=None)
    with pytest.raises(
        Refused,
        match=r"variants: several candidates \(lora-a, lora-b\) each keep a rollout state of their own",
    ):
        GatewayProcess(options, one_state)
    local = GatewayProcess(options, local_parts(options))
    assert isinstance(local.controller, Lanes)
