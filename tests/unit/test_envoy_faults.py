"""Injected faults as Envoy config: with fault injection on, each variant's endpoints lead through an
internal listener (a hop) on to its pods; a fault puts a filter there that fails or delays attempts."""

import pytest
from envoy.extensions.filters.http.fault.v3 import fault_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.v3 import percent_pb2

from gateway.envoy import names
from gateway.envoy.faults import Fault
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.rollout.spec import load_yaml, validate_spec
from gateway.xds.cache import check_consistent
from tests.unit.test_envoy_builders import ENDPOINTS
from tests.unit.test_spec import DESIGN_EXAMPLE

SPEC = validate_spec(load_yaml(DESIGN_EXAMPLE))
LISTEN = ListenerAddress("127.0.0.1", 8080)


def build(faults):
    return build_resources(SPEC, ENDPOINTS, LISTEN, faults)


def manager_of(listener) -> hcm_pb2.HttpConnectionManager:
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    return manager


def hop_route(resources, variant: str):
    (config,) = [r for r in resources.routes if r.name == f"graystack-fault-{variant}"]
    (route,) = config.virtual_hosts[0].routes
    return route


def fault_of(resources, variant: str) -> fault_pb2.HTTPFault | None:
    """The fault filter's config on the variant's hop route; None where it has none."""
    packed = hop_route(resources, variant).typed_per_filter_config.get("envoy.filters.http.fault")
    if packed is None:
        return None
    config = fault_pb2.HTTPFault()
    packed.Unpack(config)
    return config


def test_with_fault_injection_off_no_variant_has_a_hop():
    resources = build(None)
    assert [listener.name for listener in resources.listeners] == ["graystack-ingress"]
    assert sorted(c.name for c in resources.clusters) == [
        "baseline",
        "zero-layer",
        "zero-layer-with-fallback",
    ]


@pytest.mark.parametrize("faults", [{}, {"zero-layer": Fault()}, {"gone": Fault(error_rate=1.0)}])
def test_with_fault_injection_on_every_variant_has_a_hop_that_passes_what_has_no_fault(faults):
    """A fault that does nothing, or names a variant the spec lost, configures no fault."""
    resources = build(faults)
    check_consistent(resources.by_type())
    hops = {listener.name: listener for listener in resources.listeners[1:]}
    assert sorted(hops) == ["graystack-fault-baseline", "graystack-fault-zero-layer"]
    for variant in ("baseline", "zero-layer"):
        assert fault_of(resources, variant) is None
        assert hop_route(resources, variant).route.cluster == names.unfaulted_cluster(variant)


def test_a_fault_changes_only_its_hop_route():
    """Not the variant's hosts (Envoy would hold new ones until their first health check), nor a
    listener (its open connections would keep the old fault while it drains)."""
    quiet, faulted = build({}), build({"zero-layer": Fault(error_rate=1.0)})
    assert (faulted.clusters, faulted.endpoints, faulted.listeners) == (
        quiet.clusters,
        quiet.endpoints,
        quiet.listeners,
    )
    changed = [r.name for r, before in zip(faulted.routes, quiet.routes, strict=True) if r != before]
    assert changed == ["graystack-fault-zero-layer"]


def test_a_variant_reaches_its_pods_through_its_hop_and_is_health_checked_on_them():
    resources = build({"zero-layer": Fault(error_rate=0.25, status=500, latency_ms=150)})
    check_consistent(resources.by_type())
    assignments = {a.cluster_name: a for a in resources.endpoints}
    hops = [e.endpoint for e in assignments["zero-layer"].endpoints[0].lb_endpoints]
    assert [h.address.envoy_internal_address.server_listener_name for h in hops] == [
        "graystack-fault-zero-layer"
    ] * 2
    assert [h.address.envoy_internal_address.endpoint_id for h in hops] == [
        "127.0.0.1:8002",
        "127.0.0.1:8003",
    ]
    health_checked = [(h.health_check_config.address.socket_address.port_value) for h in hops]
    assert health_checked == [8002, 8003]
    behind = assignments[names.unfaulted_cluster("zero-layer")].endpoints[0].lb_endpoints
    assert [e.endpoint.address.socket_address.port_value for e in behind] == [8002, 8003]
    clusters = {c.name: c for c in resources.clusters}
    assert clusters["zero-layer"] == {c.name: c for c in build(None).clusters}["zero-layer"]
    unfaulted = clusters[names.unfaulted_cluster("zero-layer")]
    assert unfaulted.health_checks == clusters["zero-layer"].health_checks  # it sends nothing to a down pod
    assert not unfaulted.HasField("outlier_detection")


def test_the_hop_fails_the_share_asked_with_the_status_asked_and_delays_every_attempt():
    resources = build({"zero-layer": Fault(error_rate=0.25, status=500, latency_ms=150)})
    (ingress, *hops) = resources.listeners
    assert ingress == build(None).listeners[0]
    assert all(hop.HasField("internal_listener") for hop in hops)
    (hop,) = [hop for hop in hops if hop.name == "graystack-fault-zero-layer"]
    assert manager_of(hop).rds.route_config_name == "graystack-fault-zero-layer"
    assert [f.name for f in manager_of(hop).http_filters] == [
        "envoy.filters.http.fault",
        "envoy.filters.http.router",
    ]
    config = fault_of(resources, "zero-layer")
    assert config.abort.http_status == 500
    assert (config.abort.percentage.numerator, config.abort.percentage.denominator) == (
        250_000,
        percent_pb2.FractionalPercent.MILLION,
    )
    assert config.delay.fixed_delay.ToMilliseconds() == 150
    assert config.delay.percentage.numerator == 100
    route = hop_route(resources, "zero-layer")
    assert route.route.cluster == names.unfaulted_cluster("zero-layer")
    assert route.route.timeout.ToMilliseconds() == 0  # the outer route's timeouts govern the attempt


def test_errors_alone_add_no_delay_and_latency_alone_aborts_nothing():
    errors = fault_of(build({"baseline": Fault(error_rate=1.0)}), "baseline")
    assert errors.abort.percentage.numerator == 1_000_000
    assert not errors.HasField("delay")
    slow = fault_of(build({"baseline": Fault(latency_ms=40)}), "baseline")
    assert slow.delay.fixed_delay.ToMilliseconds() == 40
    assert not slow.HasField("abort")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"error_rate": 1.5}, "error_rate 1.5 is not in"),
        ({"error_rate": -0.1}, "error_rate -0.1 is not in"),
        ({"status": 200}, "status 200 is not an HTTP error status"),
        ({"status": 600}, "status 600 is not an HTTP error status"),
        ({"latency_ms": -1}, "latency_ms -1 is not in"),
    ],
)
def test_a_fault_out_of_range_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Fault(**fields)


def test_a_fault_says_what_the_variant_suffers():
    assert (
        Fault(error_rate=0.5, latency_ms=200).describe()
        == "fails 50.0% of attempts with 503, answers 200 ms late"
    )
    assert Fault(error_rate=1.0, status=429).describe() == "fails 100.0% of attempts with 429"
    assert Fault().describe() == "no fault"
