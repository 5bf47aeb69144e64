"""The gateway's live state: what goes to each proxy, and what a refused change leaves alone."""

from pathlib import Path

import pytest
from envoy.config.listener.v3 import listener_pb2

from gateway.service import Gateway
from gateway.spec.model import SpecError, validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import SnapshotCache
from gateway.xds.types import LISTENER
from tests.support.ads_client import node
from tests.unit.test_spec import DESIGN_EXAMPLE


def spec(**changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data.update(changes)
    return validate_spec(data)


@pytest.fixture
def gateway() -> Gateway:
    running = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0)
    running.load(spec(), "sha-1")
    return running


def listener_port(cache: SnapshotCache, key: str) -> int:
    listener = listener_pb2.Listener()
    cache.get(key).resources[LISTENER].items["graystack-ingress"].Unpack(listener)
    return listener.address.socket_address.port_value


def test_each_proxy_gets_a_listener_where_its_bootstrap_asked(gateway):
    gateway.on_connect("a", node("a", listen_port=8080))
    gateway.on_connect("b", node("b", listen_port=9090))
    gateway.on_connect("c", node("c", listen_port=8080))
    gateway.set_split({"zero-layer": 30})
    assert [listener_port(gateway.cache, key) for key in "abc"] == [8080, 9090, 8080]
    assert gateway.cache.get("a").version("type.googleapis.com/envoy.config.route.v3.RouteConfiguration")


def test_a_refused_spec_keeps_the_live_one_and_says_why(gateway):
    gateway.on_connect("a", node("a"))
    live, versions = gateway.live, gateway.cache.get("a").versions()
    gateway.refuse(SpecError("spec.yaml: routing.weights: weights must sum to 100, got 90"))
    assert gateway.live is live
    assert gateway.cache.get("a").versions() == versions
    assert gateway.status().spec.last_error.model_dump() == {
        "message": "spec.yaml: routing.weights: weights must sum to 100, got 90",
        "at": 1000.0,
    }
    gateway.load(spec(routing={"weights": {"baseline": 50, "zero-layer": 50}}), "sha-2")
    assert gateway.status().spec.last_error is None
    assert gateway.cache.get("a").versions()["rds"] != versions["rds"]


def test_a_spec_that_builds_an_unusable_config_is_refused(gateway):
    """Local mode has no Kubernetes endpoint source: a `service:` variant cannot go live here."""
    generation = gateway.generation
    gateway.load(
        spec(
            variants={
                "baseline": {"service": "inference-baseline", "port": 8000},
                "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
            }
        ),
        "sha-3",
    )
    assert gateway.generation == generation
    assert "Kubernetes endpoint source" in gateway.status().spec.last_error.message


def test_an_invalid_flip_changes_nothing(gateway):
    generation, routing = gateway.generation, gateway.status().routing
    with pytest.raises(SpecError, match="sum to 100"):
        gateway.set_split({"baseline": 10, "zero-layer": 10})
    assert gateway.generation == generation
    assert gateway.status().routing == routing


def test_a_spec_for_a_gateway_api_route_is_refused_until_a_driver_applies_it(gateway):
    """The spec's gateway_api section validates (the CLI writes it), but this gateway drives only its own
    Envoy: it refuses the spec, naming why, and keeps the live one, rather than ignore the section."""
    generation = gateway.generation
    api = {
        "routes": [{"name": "llm"}],
        "backends": {"baseline": {"name": "a", "port": 8000}, "zero-layer": {"name": "b", "port": 8000}},
    }
    gateway.load(spec(gateway_api=api), "sha-4")
    assert gateway.generation == generation
    assert "gateway_api: this gateway drives its own Envoy" in gateway.status().spec.last_error.message
