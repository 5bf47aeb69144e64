"""Injected faults through the admin API: refused unless the gateway was started with them on, set per
variant of the spec, shown in the status, pushed to every proxy, and gone when cleared."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from envoy.config.route.v3 import route_pb2
from fastapi.testclient import TestClient

from gateway.admin.api import FAULTS_OFF, create_admin_app, fault_injection_refusal
from gateway.admin.protocol import Status
from gateway.envoy.faults import Fault
from gateway.errors import Refused
from gateway.service import Gateway
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import AdsServer
from gateway.xds.types import LISTENER, ROUTE
from graystack.cli.root import main
from graystack.console.status_view import render_status
from tests.support.ads_client import node
from tests.unit.test_gateway_service import spec


@pytest.fixture
def gateway() -> Gateway:
    running = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0, fault_injection=True)
    running.load(spec(), "sha-1")
    running.on_connect("proxy", node("proxy"))
    return running


def faulted(gateway: Gateway) -> list[str]:
    """The variants whose hop route has a fault, as pushed to the proxy."""
    variants = []
    for name, packed in sorted(gateway.cache.get("proxy").resources[ROUTE].items.items()):
        config = route_pb2.RouteConfiguration()
        packed.Unpack(config)
        if any(r.typed_per_filter_config for host in config.virtual_hosts for r in host.routes):
            variants.append(name.removeprefix("graystack-fault-"))
    return variants


def admin(gateway: Gateway, refusal: str | None) -> TestClient:
    return TestClient(create_admin_app(gateway, AdsServer(gateway.cache), fault_refusal=refusal))


def test_faults_are_refused_by_default_and_say_how_to_turn_them_on(gateway):
    with TestClient(create_admin_app(gateway, AdsServer(gateway.cache))) as client:
        for answer in (
            client.put("/v1/faults/zero-layer", json={"error_rate": 1.0}),
            client.delete("/v1/faults/zero-layer"),
        ):
            assert answer.status_code == 403
            assert "--enable-fault-injection" in answer.json()["detail"]
        assert client.get("/v1/status").json()["fault_injection"] is False
    assert faulted(gateway) == []


@pytest.mark.parametrize(
    ("enabled", "loopback", "token", "refused"),
    [
        (False, True, None, FAULTS_OFF),
        (False, False, "secret", FAULTS_OFF),
        (True, False, None, "fault injection needs an admin token when the admin API is not on loopback"),
        (True, False, "secret", None),
        (True, True, None, None),
    ],
)
def test_faults_need_the_flag_and_off_loopback_a_token(enabled, loopback, token, refused):
    assert fault_injection_refusal(enabled, loopback, token) == refused


def test_a_fault_is_pushed_shown_in_the_status_and_cleared(gateway):
    with admin(gateway, None) as client:
        answer = client.put(
            "/v1/faults/zero-layer", json={"error_rate": 0.5, "latency_ms": 200, "wait_seconds": 0}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["fault"] == {
            "error_rate": 0.5,
            "status": 503,
            "latency_ms": 200,
            "summary": "fails 50.0% of attempts with 503, answers 200 ms late",
        }
        assert faulted(gateway) == ["zero-layer"]
        status = client.get("/v1/status").json()
        assert status["fault_injection"] is True
        assert status["faults"]["zero-layer"]["error_rate"] == 0.5
        assert "FAULT     zero-layer fails 50.0% of attempts with 503" in render_status(
            Status.model_validate(status)
        )

        cleared = client.delete("/v1/faults/zero-layer", params={"wait_seconds": 0}).json()
        assert cleared["fault"] is None
        assert client.get("/v1/status").json()["faults"] == {}
    assert faulted(gateway) == []


def test_a_new_fault_replaces_the_last_one_on_that_variant(gateway):
    with admin(gateway, None) as client:
        client.put("/v1/faults/zero-layer", json={"error_rate": 0.5, "wait_seconds": 0})
        client.put("/v1/faults/zero-layer", json={"latency_ms": 30, "status": 500, "wait_seconds": 0})
    assert gateway.faults == {"zero-layer": Fault(latency_ms=30, status=500)}


@pytest.mark.parametrize(
    "body", [{"error_rate": 2}, {"status": 302}, {"latency_ms": -5}, {"error_rate": 0.1, "extra": 1}]
)
def test_a_fault_out_of_range_is_refused_and_nothing_changes(gateway, body):
    with admin(gateway, None) as client:
        assert client.put("/v1/faults/zero-layer", json=body).status_code == 422
    assert gateway.faults == {}


def test_a_variant_the_spec_does_not_name_is_refused_naming_the_variants(gateway):
    with admin(gateway, None) as client:
        answer = client.put("/v1/faults/canary", json={"error_rate": 1.0})
    assert answer.status_code == 404
    assert answer.json()["detail"] == "no variant 'canary' in the spec (variants: baseline, zero-layer)"


def test_a_fault_survives_flips_and_reloads_but_not_its_variant_leaving_the_spec(gateway):
    gateway.set_fault("zero-layer", Fault(error_rate=1.0))
    gateway.set_split({"zero-layer": 30})
    gateway.load(spec(routing={"weights": {"baseline": 50, "zero-layer": 50}}), "sha-2")
    assert faulted(gateway) == ["zero-layer"]
    renamed = spec(
        variants={"baseline": {"endpoints": ["127.0.0.1:8001"]}, "canary": {"endpoints": ["127.0.0.1:8002"]}},
        routing={"header": "X-Client-Type", "weights": {"baseline": 100}},
    )
    gateway.load(renamed, "sha-3")
    assert gateway.last_error is None, gateway.last_error
    assert gateway.faults == {}
    assert faulted(gateway) == []


def test_a_gateway_without_fault_injection_builds_no_hop_and_refuses_faults():
    off = Gateway(SnapshotCache(), Path("spec.yaml"))
    off.load(spec(), "sha-1")
    off.on_connect("proxy", node("proxy"))
    assert list(off.cache.get("proxy").resources[LISTENER].items) == ["graystack-ingress"]
    with pytest.raises(Refused, match="fault injection is off"):
        off.set_fault("zero-layer", Fault(error_rate=1.0))


@pytest.mark.parametrize("args", [[], ["--clear", "--error-rate", "0.5"], ["--clear", "--latency-ms", "5"]])
def test_graystack_fault_takes_a_fault_or_clear_not_both_nor_neither(args):
    result = CliRunner().invoke(main, ["fault", "zero-layer", *args, "--admin-url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "give --error-rate and/or --latency-ms, or --clear" in result.output
