"""The admin API's rollout commands and status section, and `graystack status`'s rendering of it."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from fastapi.testclient import TestClient

from gateway.admin.api import Leadership, create_admin_app, follower_refusal, full_status
from gateway.admin.protocol import Status
from gateway.rollout.rollout_state import Command
from gateway.xds.server import AdsServer, Disconnected
from graystack.console.status_view import render_status
from tests.support.clock import FakeClock
from tests.unit.test_rollout_controller import PartitionedFleet, new_controller, new_gateway


@pytest.fixture
def admin(tmp_path):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, FakeClock())
    with TestClient(create_admin_app(gateway, AdsServer(gateway.cache), controller=controller)) as client:
        yield client


def test_a_command_is_applied_at_once_and_answers_with_the_rollout(admin):
    answer = admin.post("/v1/rollout/promote").json()
    assert (answer["applied"], answer["ignored"], answer["acked"]) == (True, None, True)
    assert (answer["rollout"]["label"], answer["rollout"]["weight"]) == ("step 1", 20)
    assert admin.get("/v1/status").json()["routing"]["weights"] == {"baseline": 80, "zero-layer": 20}


def test_a_command_that_makes_no_sense_here_is_ignored_with_the_reason(admin):
    answer = admin.post("/v1/rollout/retry").json()
    assert answer["applied"] is False
    assert answer["ignored"] == "only a rolled-back rollout can be retried (phase progressing)"
    assert admin.post("/v1/rollout/launch").status_code == 422


def test_status_has_a_rollout_section_that_graystack_status_renders(admin):
    admin.post("/v1/rollout/rollback")
    status = admin.get("/v1/status").json()
    rollout = status["rollout"]
    assert (rollout["name"], rollout["phase"], rollout["weight"]) == ("zero-layer", "rolled_back", 0)
    assert rollout["history"][-1]["reason"] == "rolled back: operator rollback"
    text = render_status(Status.model_validate(status))
    assert "phase     rolled_back: zero-layer 0%" in text
    assert "reason    rolled back: operator rollback" in text
    assert "step 0 -> rolled_back: rolled back: operator rollback" in text


@pytest.fixture
def follower(tmp_path):
    """A replica that does not lead, as Kubernetes mode's `leadership()` reports it (gateway-a leads)."""
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, FakeClock())
    seen = Leadership(leading=False, identity="gateway-b", leader="gateway-a")
    app = create_admin_app(gateway, AdsServer(gateway.cache), controller=controller, leadership=lambda: seen)
    with TestClient(app) as client:
        yield client, controller


def test_a_follower_refuses_commands_and_flips_naming_the_leader(follower):
    admin, controller = follower
    before = admin.get("/v1/status").json()
    for response in (
        admin.post("/v1/rollout/promote"),
        admin.put("/v1/weights", json={"weights": {"baseline": 50, "zero-layer": 50}}),
    ):
        assert response.status_code == 409
        detail = response.json()["detail"]
        assert "gateway-b is not the leader (gateway-a leads)" in detail
        assert "admin Service" in detail
    assert controller.state.label() == "step 0"
    assert admin.get("/v1/status").json()["routing"] == before["routing"]


def test_a_follower_still_answers_status_and_says_who_leads(follower):
    admin, _ = follower
    status = admin.get("/v1/status").json()
    assert status["leader"] is False
    assert (status["identity"], status["leader_identity"]) == ("gateway-b", "gateway-a")
    assert status["rollout"]["label"] == "step 0"
    text = render_status(Status.model_validate(status))
    assert "replica   gateway-b (follower, gateway-a leads: commands here are refused)" in text


def test_a_local_gateway_says_nothing_of_leaders(admin):
    assert "leader" not in admin.get("/v1/status").json()


def test_a_replica_that_stepped_down_does_not_name_itself_the_leader():
    stepped_down = Leadership(leading=False, identity="gateway-a", leader="gateway-a")  # could not renew
    assert "gateway-a is not the leader (no replica leads right now)" in follower_refusal(stepped_down)


async def test_graystack_status_says_a_stage_is_extending_with_the_requests_it_has_and_needs(tmp_path):
    from tests.support.counting_provider import CountingProvider, Traffic

    clock = FakeClock()
    provider = CountingProvider({"baseline": Traffic(190), "zero-layer": Traffic(10)})
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, clock, provider)
    for _ in range(3):
        clock.now += 600  # past the 10-minute hold, at 10 candidate requests a look
        await controller.tick()
    with TestClient(create_admin_app(gateway, AdsServer(gateway.cache), controller=controller)) as admin:
        status = admin.get("/v1/status").json()
    needed = status["rollout"]["evidence"]["stage_requests_needed"]
    text = render_status(Status.model_validate(status))
    assert f"evidence  20 of {needed} candidate requests this stage: EXTENDING past its hold" in text
    assert "error_ratio       OFF (header rules route segments apart" in text
    assert "error_rate        INCONCLUSIVE" in text
    assert "log e " in text  # each sequential test's evidence against its bound


async def test_status_names_the_proxy_a_rollback_is_pending_on_and_when_it_was_last_heard(tmp_path):
    gateway = new_gateway()
    fleet = PartitionedFleet()
    controller = new_controller(gateway, tmp_path, FakeClock(), proxies=fleet)
    controller.ack_deadline = 0.05
    ads = AdsServer(gateway.cache)
    now = time.time()  # what the ADS server keeps of a proxy whose stream ended:
    ads._gone["envoy-3"] = Disconnected(
        "envoy-3", "envoy-3", "ipv4:10.0.0.3:5000", now - 60, now - 16, now - 12
    )
    await controller.command(Command.ROLLBACK)
    await asyncio.sleep(0.2)
    status = full_status(gateway, ads, controller)
    assert [proxy.node for proxy in status.xds.disconnected] == ["envoy-3"]
    text = render_status(status)
    assert "proxies   0 connected, converged; 1 DISCONNECTED" in text
    assert re.search(r"envoy-3 \(ipv4:10.0.0.3:5000\) DISCONNECTED 12\.\ds ago, last heard 16\.\ds ago", text)
    assert "it routes by the last config it ACKed" in text
    assert "PENDING on envoy-3 (cut off from the control plane, still on the old split)" in text
    fleet.heal()
    await asyncio.sleep(0.1)
    assert "PENDING" not in render_status(full_status(gateway, AdsServer(gateway.cache), controller))
