"""`approval: evidence` through the real controller (fake clock, counting provider feeding each answer's
exact TTFT): a healthy candidate is approved by itself, one 1.3x slower never is and waits for
`approve`; the spec's refusals; the plan's budget and key."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gateway.admin.api import create_admin_app
from gateway.admin.protocol import Status
from gateway.rollout.plan import NOT_WORSE, plan_for
from gateway.spec.model import SpecError, validate_spec
from gateway.xds.server import AdsServer
from graystack.console.status_view import render_status
from tests.support.clock import FakeClock
from tests.support.counting_provider import CountingProvider, Traffic
from tests.unit.test_rollout_controller import new_controller, new_gateway, spec_data
from tests.unit.test_rollout_gates import gated, past_the_hold

GRID = tuple(0.05 * 1.25**i for i in range(8))  # TTFT seconds, 1.25x apart: no value ties a scaled one


def traffic(slowdown: float, per_value: int = 50) -> list[Traffic]:
    """One look's answers of one variant: `per_value` requests at each grid TTFT, `slowdown` times it."""
    return [Traffic(per_value, ttft=slowdown * v, itl=slowdown * v / 10) for v in GRID]


def provider(slowdown: float) -> CountingProvider:
    return CountingProvider({"baseline": traffic(1.0), "zero-layer": traffic(slowdown)})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_an_evidence_gate_approves_a_healthy_candidate_by_itself(tmp_path, clock):
    gateway = new_gateway(gated(approval="evidence"))
    controller = new_controller(gateway, tmp_path, clock, provider(1.0))
    await past_the_hold(controller, clock)
    looks = 0
    while controller.status().step == 0 and looks < 30:
        clock.now += 5
        await controller.tick()
        looks += 1
    status = controller.status()
    assert (status.step, status.weight) == (1, 20), status.last_decision.outcome
    assert gateway.live.routing.weights == {"baseline": 80, "zero-layer": 20}
    assert status.history[-1].reason.startswith("checks passed")  # nobody approved it
    assert 3 < looks < 30  # it took the evidence some looks (3200 error-free requests for the errors part)


async def test_an_evidence_gate_never_approves_a_candidate_1_3x_slower_and_approve_still_works(
    tmp_path, clock
):
    gateway = new_gateway(gated(approval="evidence"))
    controller = new_controller(gateway, tmp_path, clock, provider(1.3))
    await past_the_hold(controller, clock)
    for _ in range(60):  # 24000 answers each: the rollback's checks (1.5x) pass, the gate holds
        clock.now += 5
        await controller.tick()
    status = controller.status()
    assert (status.step, status.weight) == (0, 5)
    outcome = status.last_decision.outcome
    assert outcome.startswith(
        "hold: awaiting approval of step 1 (weight 20%): graystack approve: not yet shown"
    )
    assert {check.verdict for check in status.last_decision.checks} == {"pass"}
    parts = {part.name: part for part in status.gate.not_worse.parts}
    assert not parts["ttft"].shown
    assert not parts["itl"].shown
    assert parts["errors"].shown
    assert parts["ttft"].log_evalue < 0 < status.gate.not_worse.log_bound
    assert parts["ttft"].samples == 62 * 400  # every look's answers
    app = create_admin_app(gateway, AdsServer(gateway.cache), controller=controller)
    with TestClient(app) as admin:
        text = render_status(Status.model_validate(admin.get("/v1/status").json()))
        answer = admin.post("/v1/rollout/approve").json()
    assert "approval  the step to 20% AWAITS `graystack approve`" in text
    assert "not worse: ttft   not yet shown: log e-value -" in text
    assert "not worse: errors shown" in text
    assert (answer["applied"], answer["rollout"]["weight"]) == (True, 20)
    assert controller.status().history[-1].reason == "operator approve"


def test_the_gate_spends_one_share_of_the_budget_and_specs_without_it_keep_their_key():
    plain, manual, evidence = (
        plan_for(validate_spec(d))
        for d in (spec_data(), gated(approval="manual"), gated(approval="evidence"))
    )
    assert NOT_WORSE not in plain.tests
    assert plain.not_worse is None
    assert evidence.tests == (*plain.tests, NOT_WORSE)
    assert evidence.alpha == pytest.approx(plain.alpha * len(plain.tests) / (len(plain.tests) + 1))
    assert manual.key == plain.key != evidence.key
    assert evidence.not_worse.max_slowdown == 0.1
    assert evidence.not_worse.max_error_rate == plain.max_error_rate  # the spec's, unless the margin says
    other = plan_for(validate_spec(gated(approval={"evidence": {"max_slowdown": 0.05}})))
    assert other.key != evidence.key


@pytest.mark.parametrize(
    ("approval", "analysis", "named"),
    [
        ({"evidence": {"max_slowdown": 0}}, {}, "strategy.steps.1.approval"),
        ({"evidence": {"max_slowdown": 0.5}}, {}, "strategy.steps.1.approval.evidence.max_slowdown"),
        ({"evidence": {"max_error_rate": 0.01}}, {}, "strategy.steps.1.approval.evidence.max_error_rate"),
        ({"evidence": {"max_speedup": 0.1}}, {}, "strategy.steps.1.approval"),
        ("automatic", {}, "strategy.steps.1.approval"),
        ("evidence", {"latency_source": "histograms"}, "analysis.latency_source: answers"),
    ],
)
def test_an_evidence_gate_the_rollout_cannot_judge_is_refused_with_the_field_named(approval, analysis, named):
    data = gated(approval=approval)
    data["analysis"].update(analysis)
    with pytest.raises(SpecError, match=named.replace(".", r"\.")):
        validate_spec(data)


def test_two_evidence_gates_share_one_margin():
    data = gated(approval="evidence")
    data["strategy"]["steps"][2]["approval"] = {"evidence": {"max_slowdown": 0.2}}
    with pytest.raises(SpecError, match=r"strategy\.steps\.2\.approval: .* differs from the first"):
        validate_spec(data)
    data["strategy"]["steps"][2]["approval"] = "evidence"
    assert validate_spec(data).strategy.steps[2].approval.evidence.max_slowdown == 0.1
