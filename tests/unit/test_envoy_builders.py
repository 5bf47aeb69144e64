"""The pure builders: what Envoy will do with the config follows from these fields."""

import pytest
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from gateway import names
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.cache import check_consistent
from tests.unit.test_spec import DESIGN_EXAMPLE

ENDPOINTS = {"baseline": [("127.0.0.1", 8001)], "zero-layer": [("127.0.0.1", 8002), ("127.0.0.1", 8003)]}


def build(**changes):
    data = load_yaml(DESIGN_EXAMPLE)
    data.update(changes)
    return build_resources(validate_spec(data), ENDPOINTS, ListenerAddress("127.0.0.1", 8080))


def routes_of(resources):
    """The chat API's split routes, one per segment: header rules, then the default split (every split
    API of the table has the same, gateway/envoy/api_routes.py)."""
    (route_config,) = resources.routes
    (host,) = route_config.virtual_hosts
    return [r for r in host.routes if " POST /v1/chat/completions|" in r.name]


def test_header_rules_come_first_then_the_weighted_default():
    routes = routes_of(build())
    assert [r.name.partition(" ")[0] for r in routes] == [
        "x-client-type=high_load",
        "x-client-type=mobile",
        "default",
    ]
    high_load, mobile, default = routes
    method, matcher = high_load.match.headers
    assert (method.name, method.string_match.exact) == (":method", "POST")
    assert matcher.name == "X-Client-Type"
    assert matcher.string_match.exact == "high_load"
    assert not matcher.HasField("exact_match")  # deprecated in Envoy; may become fatal
    assert [(c.name, c.weight.value) for c in high_load.route.weighted_clusters.clusters] == [
        (names.fallback_cluster("zero-layer"), 100)
    ]
    assert [(c.name, c.weight.value) for c in mobile.route.weighted_clusters.clusters] == [
        ("baseline", 80),
        (names.fallback_cluster("zero-layer"), 20),
    ]
    assert [h.name for h in default.match.headers] == [":method"]
    assert [(c.name, c.weight.value) for c in default.route.weighted_clusters.clusters] == [
        ("baseline", 95),
        (names.fallback_cluster("zero-layer"), 5),
    ]
    assert not default.route.weighted_clusters.HasField("total_weight")  # deprecated, ignored by Envoy


def test_a_variant_at_zero_percent_is_left_out_of_the_split():
    routes = routes_of(build(routing={"weights": {"baseline": 100, "zero-layer": 0}}))
    assert [c.name for c in routes[-1].route.weighted_clusters.clusters] == ["baseline"]


def test_without_a_fallback_routes_name_the_variant_clusters_and_no_aggregate_exists():
    resources = build(retries={"attempts": 2})
    assert [c.name for c in resources.clusters] == [
        "baseline",
        "zero-layer",
        names.models_cluster("baseline"),
    ]
    default = routes_of(resources)[-1]
    assert [c.name for c in default.route.weighted_clusters.clusters] == ["baseline", "zero-layer"]
    assert not default.route.retry_policy.HasField("retry_priority")
    assert default.route.retry_policy.num_retries.value == 2


def test_timeouts_and_retries():
    policy_route = routes_of(build())[-1].route
    assert policy_route.timeout.seconds == 8
    assert policy_route.retry_policy.per_try_idle_timeout.seconds == 2
    assert policy_route.retry_policy.retry_on == "5xx,reset,connect-failure"
    assert policy_route.retry_policy.retry_priority.name == "envoy.retry_priorities.previous_priorities"
    no_limit = routes_of(build(timeouts={"request": 0}))[-1].route
    assert no_limit.HasField("timeout")  # explicitly 0 (= none), not Envoy's 15 s default
    assert no_limit.timeout.seconds == 0
    assert not no_limit.retry_policy.HasField("per_try_idle_timeout")


def test_the_fallback_aggregate_tries_the_variant_then_the_baseline():
    from envoy.extensions.clusters.aggregate.v3 import cluster_pb2 as aggregate_pb2

    clusters = {c.name: c for c in build().clusters}
    aggregate = clusters[names.fallback_cluster("zero-layer")]
    config = aggregate_pb2.ClusterConfig()
    assert aggregate.cluster_type.typed_config.Unpack(config)
    assert list(config.clusters) == ["zero-layer", "baseline"]
    assert aggregate.circuit_breakers.thresholds[0].max_retries.value >= 1024


def test_variant_clusters_are_health_checked_and_never_panic_route_to_an_ejected_host():
    clusters = {c.name: c for c in build().clusters}
    variant, baseline = clusters["zero-layer"], clusters["baseline"]
    (check,) = variant.health_checks
    assert check.http_health_check.path == "/readyz"
    for required in (
        "timeout",
        "interval",
        "unhealthy_threshold",
        "healthy_threshold",
        "no_traffic_interval",
    ):
        assert check.HasField(required), required
    assert variant.outlier_detection.max_ejection_percent.value == 100
    assert variant.common_lb_config.healthy_panic_threshold.value == 0.0
    assert not baseline.common_lb_config.HasField("healthy_panic_threshold")  # the fallback keeps Envoy's


def test_endpoints_and_listener():
    resources = build()
    assignment = {e.cluster_name: e for e in resources.endpoints}["zero-layer"]
    addresses = [
        (lb.endpoint.address.socket_address.address, lb.endpoint.address.socket_address.port_value)
        for lb in assignment.endpoints[0].lb_endpoints
    ]
    assert addresses == ENDPOINTS["zero-layer"]
    (listener,) = resources.listeners
    assert listener.address.socket_address.port_value == 8080


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"retries": {"attempts": 0}},
        {"outlier_detection": None},
        {"routing": {"weights": {"baseline": 100}}},
        {"routing": {"weights": {"baseline": 100}, "mirror": {"variant": "zero-layer"}}},
    ],
)
def test_every_build_is_a_consistent_snapshot(changes):
    resources = build(**changes)
    check_consistent(resources.by_type())


def test_a_mirror_copies_what_its_variant_does_not_serve_through_a_measuring_hop_to_its_endpoints():
    mirror = {"variant": "zero-layer", "percent": 40}
    rules = [{"value": "high_load", "variant": "zero-layer"}, {"value": "web", "variant": "baseline"}]
    resources = build(routing={"weights": {"baseline": 100}, "rules": rules, "mirror": mirror})
    high_load, web, default = routes_of(resources)
    assert not high_load.route.request_mirror_policies  # already served by zero-layer: no second copy
    for route in (web, default):
        (policy,) = route.route.request_mirror_policies
        assert policy.cluster_header == names.MIRROR_HEADER  # named by the weighted cluster the split chose
        assert [m.remove for m in policy.request_headers_mutations] == [names.MIRROR_HEADER]
        fraction = policy.runtime_fraction.default_value
        assert (fraction.numerator, fraction.denominator) == (40, fraction.HUNDRED)
        mirrored_to = {
            cluster.name: [
                h.header.value for h in cluster.request_headers_to_add if h.header.key == names.MIRROR_HEADER
            ]
            for cluster in route.route.weighted_clusters.clusters
        }
        assert mirrored_to == {"baseline": [names.shadow_hop_cluster("zero-layer")]}
    # a split that gives the mirror's variant a share copies the others' requests only
    even = build(routing={"weights": {"baseline": 50, "zero-layer": 50}, "mirror": mirror})
    (policy,) = routes_of(even)[-1].route.request_mirror_policies
    clusters = routes_of(even)[-1].route.weighted_clusters.clusters
    headers = {c.name: ([h.header.value for h in c.request_headers_to_add if h.header.key == names.MIRROR_HEADER],
                        list(c.request_headers_to_remove)) for c in clusters}  # fmt: skip
    assert headers == {
        "baseline": ([names.shadow_hop_cluster("zero-layer")], []),
        names.fallback_cluster("zero-layer"): (
            [],
            [names.MIRROR_HEADER],
        ),  # a client's own value is removed: never copied twice
    }
    # the hop: an internal listener that measures each copy, as the ingress does, and forwards it on
    hop = next(c for c in resources.clusters if c.name == names.shadow_hop_cluster("zero-layer"))
    (endpoint,) = hop.load_assignment.endpoints[0].lb_endpoints
    listener_name = endpoint.endpoint.address.envoy_internal_address.server_listener_name
    (listener,) = [li for li in resources.listeners if li.name == listener_name]
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    assert [f.name for f in manager.http_filters] == ["envoy.filters.http.lua", "envoy.filters.http.router"]
    log = als_pb2.HttpGrpcAccessLogConfig()
    manager.access_log[0].typed_config.Unpack(log)
    assert log.common_config.log_name == names.SHADOW_LOG
    routes = manager.route_config.virtual_hosts[0].routes
    assert {route.route.cluster for route in routes} == {names.shadow_cluster("zero-layer")}
    # each split API under its table name: a copy is measured as its API's (embeddings: no first token)
    assert {names.api_of_route(route.name) for route in routes} >= {
        ("openai_chat", frozenset({"errors", "latency"})),
        ("openai_embeddings", frozenset({"errors"})),
    }
    shadow = next(c for c in resources.clusters if c.name == names.shadow_cluster("zero-layer"))
    assert shadow.eds_cluster_config.service_name == "zero-layer"  # the variant's own endpoints
    assert not shadow.health_checks  # a copy sent to a pod that is down fails where the analysis sees it
    assert not shadow.HasField("outlier_detection")


def test_without_a_mirror_there_is_no_shadow_cluster_and_no_mirror_policy():
    resources = build(
        routing={"weights": {"baseline": 100}, "mirror": {"variant": "zero-layer", "percent": 0}}
    )
    assert not any(r.route.request_mirror_policies for r in routes_of(resources))
    assert names.shadow_cluster("zero-layer") in [c.name for c in resources.clusters]
    assert names.shadow_cluster("zero-layer") not in [c.name for c in build().clusters]
    assert [li.name for li in build().listeners] == [names.LISTENER]
