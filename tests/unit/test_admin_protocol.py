"""The admin protocol (gateway/admin/protocol.py), held on both sides: the gateway documents every answer,
and the client refuses an answer with a misspelt or a missing field, naming it, and writes a good one
back as it was sent."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from gateway.admin.api import ERROR_STATUS, Leadership, create_admin_app
from gateway.admin.protocol import FaultChange, SplitChange
from gateway.errors import GatewayError
from gateway.xds.server import AdsServer
from graystack.admin_client import AdminClient, AdminError, dumps
from graystack.cli.root import main
from tests.support.clock import FakeClock
from tests.unit.test_rollout_controller import new_controller, new_gateway


@pytest.fixture
def answer(tmp_path) -> dict:
    """A real GET /v1/status answer, of a follower (so the fields only Kubernetes mode has are in it)."""
    gateway = new_gateway()
    controller = new_controller(gateway, tmp_path, FakeClock())
    seen = Leadership(leading=False, identity="gateway-b", leader="gateway-a")
    app = create_admin_app(gateway, AdsServer(gateway.cache), controller=controller, leadership=lambda: seen)
    with TestClient(app) as admin:
        return admin.get("/v1/status").json()


def client_answering(answer: dict) -> AdminClient:
    """A client whose gateway is a stand-in answering `answer` to every call."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    return AdminClient("http://gateway", transport=transport)


def test_a_status_is_parsed_and_written_back_as_the_gateway_sent_it(answer):
    with client_answering(answer) as client:
        status = client.status()
    assert (status.rollout.name, status.leader_identity) == ("zero-layer", "gateway-a")
    assert json.loads(dumps(status)) == answer
    assert list(json.loads(dumps(status))) == list(answer)  # in the same order


def test_a_local_gateways_status_leaves_the_leader_fields_out_when_written_back(answer):
    for field in ("leader", "identity", "leader_identity"):
        del answer[field]
    with client_answering(answer) as client:
        assert json.loads(dumps(client.status())) == answer


def test_an_answer_with_a_misspelt_field_is_refused_naming_it(answer):
    answer["rollout"]["phaze"] = answer["rollout"].pop("phase")
    with client_answering(answer) as client, pytest.raises(AdminError) as refused:
        client.status()
    assert "not a Status" in str(refused.value)
    assert "rollout.RolloutSection.phaze: Extra inputs are not permitted" in str(refused.value)
    assert "rollout.RolloutSection.phase: Field required" in str(refused.value)


def test_an_answer_with_a_missing_field_is_refused_naming_it(answer):
    del answer["spec"]["sha256"]
    with client_answering(answer) as client, pytest.raises(AdminError, match=r"spec\.sha256: Field required"):
        client.status()


def test_openapi_documents_every_answer_and_each_error_has_one_status():
    gateway = new_gateway()
    schema = create_admin_app(gateway, AdsServer(gateway.cache)).openapi()
    answers = {
        (method.upper(), path): operation["responses"]["200"]["content"]["application/json"]["schema"]
        for path, operations in schema["paths"].items()
        if path.startswith("/v1/")
        for method, operation in operations.items()
    }
    assert answers == {
        ("GET", "/v1/status"): {"$ref": "#/components/schemas/Status"},
        ("GET", "/v1/experiment"): {"$ref": "#/components/schemas/ExperimentStatus"},
        ("PUT", "/v1/weights"): {"$ref": "#/components/schemas/FlipResult"},
        ("PUT", "/v1/faults/{variant}"): {"$ref": "#/components/schemas/FaultResult"},
        ("DELETE", "/v1/faults/{variant}"): {"$ref": "#/components/schemas/FaultResult"},
        ("POST", "/v1/rollout/{command}"): {"$ref": "#/components/schemas/CommandResult"},
    }
    assert set(ERROR_STATUS) == set(GatewayError.__subclasses__())


def test_an_admin_api_off_loopback_without_a_token_is_refused_at_start_naming_the_fix(tmp_path):
    answer = CliRunner().invoke(
        main, ["gateway", "--spec", str(tmp_path / "spec.yaml"), "--admin-host", "0.0.0.0"]
    )
    assert answer.exit_code == 1
    assert "refusing to serve the admin API on 0.0.0.0 without a token" in answer.output
    assert "--admin-token" in answer.output


def test_the_client_sends_the_protocols_requests_and_names_a_bad_value_before_sending():
    sent: list[httpx.Request] = []

    def refusing(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(400, json={"detail": "stand-in"})

    client = AdminClient("http://gateway", transport=httpx.MockTransport(refusing))
    with pytest.raises(AdminError, match=r"not sent: error_rate: Input should be less than or equal to 1"):
        client.set_fault("b", error_rate=2.0, status=503, latency_ms=0)
    assert sent == []  # refused here, as the gateway would refuse it
    with pytest.raises(AdminError, match="stand-in"):
        client.set_fault("b", error_rate=0.5, status=500, latency_ms=20, wait_seconds=0)
    assert FaultChange.model_validate_json(sent[-1].content) == FaultChange(
        error_rate=0.5, status=500, latency_ms=20, wait_seconds=0
    )
    with pytest.raises(AdminError, match="stand-in"):
        client.set_weights({"b": 20}, segment="mobile")
    assert SplitChange.model_validate_json(sent[-1].content).weights == {"b": 20}
    gateway = new_gateway()
    schema = create_admin_app(gateway, AdsServer(gateway.cache)).openapi()
    bodies = {
        path: operations["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        for path, operations in schema["paths"].items()
        if "put" in operations
    }
    assert bodies == {
        "/v1/weights": "#/components/schemas/SplitChange",
        "/v1/faults/{variant}": "#/components/schemas/FaultChange",
    }
