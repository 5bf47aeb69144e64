"""Envoy itself (`envoy --mode validate`) accepts the bootstrap and everything the builders make."""

import subprocess
import sys

import pytest
import yaml
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from gateway.envoy.bootstrap import BootstrapOptions, build_bootstrap, message_yaml
from gateway.envoy.faults import Fault
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
from tests.unit.test_spec import DESIGN_EXAMPLE


def validate(envoy: str, config: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "envoy.yaml"
    path.write_text(config)
    return subprocess.run(
        [envoy, "--mode", "validate", "-c", str(path), "--disable-hot-restart", "-l", "warning"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_bootstrap_validates(envoy_binary, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "graystack",
            "envoy-bootstrap",
            "--xds-host",
            "graystack-gateway",
            "--listen-port",
            "18080",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert yaml.safe_load(out)["static_resources"]["clusters"][0]["type"] == "STRICT_DNS"  # a DNS name
    result = validate(envoy_binary, out, tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout


def route_name(listener) -> str:
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    return manager.rds.route_config_name


def with_inline_routes(listener, route_config):
    """The listener with its RDS route config inlined, so validation covers the routes too."""
    chain_filter = listener.filter_chains[0].filters[0]
    manager = hcm_pb2.HttpConnectionManager()
    chain_filter.typed_config.Unpack(manager)
    manager.ClearField("rds")
    manager.route_config.CopyFrom(route_config)
    chain_filter.typed_config.Pack(manager)
    return listener


@pytest.mark.parametrize(
    ("changes", "faults"),
    [
        ({}, None),
        ({"retries": {"attempts": 2}, "outlier_detection": None, "timeouts": {"request": 0}}, None),
        ({"routing": {"weights": {"baseline": 100}, "rules": []}}, None),
        (
            {
                "health_check": None,
                "variants": {
                    "baseline": {"endpoints": ["127.0.0.1:8001"], "health_check": {"path": "/health"}},
                    "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
                },
            },
            None,
        ),
        ({}, {"zero-layer": Fault(error_rate=0.5, status=500, latency_ms=100)}),  # every variant's hop
        # graystack's Envoy asking a picker within each variant (gateway/envoy/picking.py): over TLS to a
        # DNS name, each policy its fallback; in plaintext to an IP, behind a fault hop
        (
            {
                "envoy_picker": {"host": "graystack-epp.serving", "port": 9002},
                "retries": {"fallback": None},
                "routing": {
                    "weights": {"baseline": 90, "zero-layer": 10},
                    "affinity": [{"header": "x-user"}],
                },
                "variants": {
                    "baseline": {"endpoints": ["127.0.0.1:8001"], "load_balancing": "least_request"},
                    "zero-layer": {"endpoints": ["127.0.0.1:8002"], "load_balancing": "maglev"},
                },
            },
            None,
        ),
        (
            {
                "envoy_picker": {"host": "127.0.0.1", "port": 9002, "tls": False},
                "retries": {"fallback": None},
            },
            {"zero-layer": Fault(error_rate=0.5, status=500, latency_ms=100)},
        ),
        # the picker the gateway serves: ext_authz over HTTP/1.1 (TLS, a DNS name), its log of the picks' ends
        (
            {
                "envoy_picker": {"host": "graystack-epp.serving", "port": 9002, "serve": True},
                "retries": {"fallback": None},
                "routing": {
                    "weights": {"baseline": 90, "zero-layer": 10},
                    "affinity": [{"header": "x-user"}],
                },
            },
            None,
        ),
        (  # cohorts from every kind of source, rules on the body's model, pod affinity
            {
                "routing": {
                    "weights": {"baseline": 80, "zero-layer": 20},
                    "rules": [{"value": "big", "weights": {"baseline": 50, "zero-layer": 50}}],
                    "body": "model",
                    "affinity": [{"header": "x-user-id"}, {"cookie": "sid"}, {"body": "metadata.user_id"}],
                },
                "variants": {
                    "baseline": {"endpoints": ["127.0.0.1:8001"], "load_balancing": "maglev"},
                    "zero-layer": {"endpoints": ["127.0.0.1:8002"], "load_balancing": "ring_hash"},
                },
            },
            None,
        ),
    ],
)
def test_built_resources_validate_as_static_config(envoy_binary, tmp_path, changes, faults):
    """The dynamic resources, loaded statically: Envoy checks every field as it would on ADS."""
    data = load_yaml(DESIGN_EXAMPLE)
    data.update(changes)
    built = build_resources(
        validate_spec(data),
        {"baseline": [("127.0.0.1", 8001)], "zero-layer": [("127.0.0.1", 8002)]},
        ListenerAddress("127.0.0.1", 18080),
        faults,
    )
    bootstrap = build_bootstrap(BootstrapOptions())
    bootstrap.static_resources.clusters.extend(built.clusters)
    routes = {route.name: route for route in built.routes}
    bootstrap.static_resources.listeners.extend(
        [with_inline_routes(listener, routes[route_name(listener)]) for listener in built.listeners]
    )
    result = validate(envoy_binary, message_yaml(bootstrap), tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
