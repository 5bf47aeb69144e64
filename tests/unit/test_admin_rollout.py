"""The admin API's rollout commands and status section, and `graystack status`'s rendering of it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gateway.admin.api import create_admin_app
from gateway.xds.server import AdsServer
from graystack.status_view import render_status
from tests.unit.test_rollout_controller import Clock, new_controller, new_gateway


@pytest.fixture
def admin(tmp_path):
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, Clock())
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
    text = render_status(status)
    assert "phase     rolled_back: zero-layer 0%" in text
    assert "reason    rolled back: operator rollback" in text
    assert "step 0 -> rolled_back: rolled back: operator rollback" in text
