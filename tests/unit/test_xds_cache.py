"""Snapshot versions: unique per process, moved only by content, endpoints re-sent with clusters."""

import pytest

from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import InconsistentSnapshot, SnapshotCache
from gateway.xds.types import CLUSTER, ENDPOINT, LISTENER, ROUTE
from tests.unit.test_spec import DESIGN_EXAMPLE

ENDPOINTS = {"baseline": [("127.0.0.1", 8001)], "zero-layer": [("127.0.0.1", 8002)]}


def resources(**changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data.update(changes)
    return build_resources(validate_spec(data), ENDPOINTS, ListenerAddress()).by_type()


def test_versions_differ_between_control_plane_processes():
    first, second = SnapshotCache(), SnapshotCache()
    assert first.version_prefix != second.version_prefix
    a = first.set_resources("node", resources())
    b = second.set_resources("node", resources())
    assert a.versions().keys() == b.versions().keys()
    assert not set(a.versions().values()) & set(b.versions().values())


def test_only_the_types_whose_content_changed_get_new_versions():
    cache = SnapshotCache()
    before = cache.set_resources("node", resources()).versions()
    assert cache.set_resources("node", resources()).versions() == before
    after = cache.set_resources(
        "node", resources(routing={"weights": {"baseline": 50, "zero-layer": 50}})
    ).versions()
    assert after["rds"] != before["rds"]
    assert {t: after[t] for t in ("cds", "eds", "lds")} == {t: before[t] for t in ("cds", "eds", "lds")}


def test_a_cluster_change_also_moves_the_endpoints_version():
    """Otherwise Envoy keeps the changed cluster warming for 15 s, waiting for its endpoints."""
    cache = SnapshotCache()
    before = cache.set_resources("node", resources()).versions()
    after = cache.set_resources("node", resources(health_check={"interval": "5s"})).versions()
    assert after["cds"] != before["cds"]
    assert after["eds"] != before["eds"]
    assert after["rds"] == before["rds"]


def test_a_route_to_a_missing_cluster_is_refused_and_nothing_changes():
    cache = SnapshotCache()
    good = cache.set_resources("a", resources())
    broken = resources()
    broken[CLUSTER] = [c for c in broken[CLUSTER] if c.name != "baseline"]
    with pytest.raises(InconsistentSnapshot, match="baseline"):
        cache.set_all({"b": resources(), "a": broken})
    assert cache.get("a") is good
    assert cache.get("b") is None  # all or nothing


def test_missing_endpoints_and_missing_route_configs_are_refused():
    no_endpoints = resources()
    no_endpoints[ENDPOINT] = no_endpoints[ENDPOINT][:1]
    with pytest.raises(InconsistentSnapshot, match="without a load assignment"):
        SnapshotCache().set_resources("n", no_endpoints)
    no_routes = resources()
    no_routes[ROUTE] = []
    with pytest.raises(InconsistentSnapshot, match="listener"):
        SnapshotCache().set_resources("n", no_routes)
    duplicate = resources()
    duplicate[LISTENER] = duplicate[LISTENER] * 2
    with pytest.raises(InconsistentSnapshot, match="two Listener"):
        SnapshotCache().set_resources("n", duplicate)
