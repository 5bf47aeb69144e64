"""Injected faults as Envoy config: a faulted variant's endpoints lead through an internal listener (a
hop) whose fault filter fails or delays attempts, on to its pods; everything else is as it was."""

import pytest
from envoy.config.core.v3 import health_check_pb2
from envoy.extensions.filters.http.fault.v3 import fault_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.v3 import percent_pb2
from pydantic import ValidationError

from gateway import names
from gateway.admin.protocol import MAX_FAULT_LATENCY_MS, FaultChange
from gateway.envoy.faults import Fault
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
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


def fault_of(resources, variant: str) -> fault_pb2.HTTPFault:
    """The fault filter's config on the variant's hop route."""
    packed = hop_route(resources, variant).typed_per_filter_config["envoy.filters.http.fault"]
    config = fault_pb2.HTTPFault()
    packed.Unpack(config)
    return config


@pytest.mark.parametrize("faults", [None, {}, {"zero-layer": Fault()}, {"gone": Fault(error_rate=1.0)}])
def test_without_an_active_fault_the_config_is_as_it_was(faults):
    """A fault that does nothing, or names a variant the spec lost, builds no hop."""
    assert build(faults) == build_resources(SPEC, ENDPOINTS, LISTEN)


def test_a_faulted_variant_leads_through_its_hop_and_keeps_its_pods_draining_and_checked():
    quiet = build(None)
    resources = build({"zero-layer": Fault(error_rate=0.25, status=500, latency_ms=150)})
    check_consistent(resources.by_type())
    assignments = {a.cluster_name: a for a in resources.endpoints}
    (locality,) = assignments["zero-layer"].endpoints
    hops, pods = locality.lb_endpoints[:2], locality.lb_endpoints[2:]
    assert [h.endpoint.address.envoy_internal_address.server_listener_name for h in hops] == [
        "graystack-fault-zero-layer"
    ] * 2
    assert [h.endpoint.address.envoy_internal_address.endpoint_id for h in hops] == [
        "127.0.0.1:8002",
        "127.0.0.1:8003",
    ]
    assert all(h.endpoint.health_check_config.disable_active_health_check for h in hops)  # healthy at once
    # The pods: the same hosts as unfaulted (their health kept), left out of load balancing meanwhile.
    (quiet_pods,) = {a.cluster_name: a for a in quiet.endpoints}["zero-layer"].endpoints
    assert [p.endpoint for p in pods] == [p.endpoint for p in quiet_pods.lb_endpoints]
    assert {p.health_status for p in pods} == {health_check_pb2.DRAINING}

    behind = assignments[names.unfaulted_cluster("zero-layer")].endpoints[0].lb_endpoints
    assert [e.endpoint.address.socket_address.port_value for e in behind] == [8002, 8003]
    assert assignments["baseline"] == {a.cluster_name: a for a in quiet.endpoints}["baseline"]
    clusters = {c.name: c for c in resources.clusters}
    assert list(quiet.clusters) == [c for c in resources.clusters if c.name != "zero-layer-unfaulted"]
    unfaulted = clusters[names.unfaulted_cluster("zero-layer")]
    assert not unfaulted.health_checks
    assert not unfaulted.HasField("outlier_detection")


def test_changing_a_fault_changes_only_its_hop_route():
    """Not a listener: a changed one keeps serving its open connections under the old fault while it
    drains."""
    once, again = build({"zero-layer": Fault(error_rate=1.0)}), build({"zero-layer": Fault(latency_ms=10)})
    assert (again.clusters, again.endpoints, again.listeners) == (
        once.clusters,
        once.endpoints,
        once.listeners,
    )
    changed = [r.name for r, before in zip(again.routes, once.routes, strict=True) if r != before]
    assert changed == ["graystack-fault-zero-layer"]


def test_the_hop_fails_the_share_asked_with_the_status_asked_and_delays_every_attempt():
    resources = build({"zero-layer": Fault(error_rate=0.25, status=500, latency_ms=150)})
    (ingress, hop) = resources.listeners
    assert ingress == build(None).listeners[0]
    assert hop.name == "graystack-fault-zero-layer"
    assert hop.HasField("internal_listener")
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
    "fields",
    [
        {"error_rate": 1.5},
        {"error_rate": -0.1},
        {"status": 200},
        {"status": 600},
        {"latency_ms": -1},
        {"latency_ms": MAX_FAULT_LATENCY_MS + 1},
    ],
)
def test_a_fault_out_of_range_is_refused_where_it_comes_in_naming_the_field(fields):
    """A Fault is built from the admin API's FaultChange only, which checks its ranges."""
    with pytest.raises(ValidationError) as refused:
        FaultChange(**fields)
    assert [problem["loc"] for problem in refused.value.errors()] == [tuple(fields)]


def test_a_fault_says_what_the_variant_suffers():
    assert (
        Fault(error_rate=0.5, latency_ms=200).describe()
        == "fails 50.0% of attempts with 503, answers 200 ms late"
    )
    assert Fault(error_rate=1.0, status=429).describe() == "fails 100.0% of attempts with 429"
    assert Fault().describe() == "no fault"
