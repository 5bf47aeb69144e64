"""The builders of graystack's own Envoy asking a picker within each variant (gateway/envoy/picking.py):
override_host over the variant's own policy, the ext_proc filter fail-open and on the split's weighted
clusters alone, each naming its variant."""

from __future__ import annotations

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2, processing_mode_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.load_balancing_policies.override_host.v3 import override_host_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from gateway import names
from gateway.envoy import picker_checks
from gateway.envoy.picking import EXT_PROC, OVERRIDE_HOST
from tests.unit.test_envoy_builders import build, routes_of

PICKER = {"host": "127.0.0.1", "port": 9002, "tls": False}


def picked(**changes):
    return build(envoy_picker=PICKER, retries={"fallback": None}, **changes)


def cluster(resources, name: str) -> cluster_pb2.Cluster:
    return next(c for c in resources.clusters if c.name == name)


def filters(resources) -> list[hcm_pb2.HttpFilter]:
    manager = hcm_pb2.HttpConnectionManager()
    resources.listeners[0].filter_chains[0].filters[0].typed_config.Unpack(manager)
    return list(manager.http_filters)


@pytest.mark.parametrize("policy", ["round_robin", "least_request", "ring_hash", "maglev"])
def test_each_variant_takes_the_picked_pod_else_its_own_policy(policy):
    variants = {
        "baseline": {"endpoints": ["127.0.0.1:8001"], "load_balancing": policy},
        "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
    }
    built = picked(variants=variants, routing={"weights": {"baseline": 100}, "affinity": [{"header": "x-u"}]})
    (chosen,) = cluster(built, "baseline").load_balancing_policy.policies
    assert chosen.typed_extension_config.name == OVERRIDE_HOST
    override = override_host_pb2.OverrideHost()
    chosen.typed_extension_config.typed_config.Unpack(override)
    (source,) = override.override_host_sources
    assert (source.metadata.key, source.metadata.path[0].key) == (
        names.EPP_LB_NAMESPACE,
        names.EPP_DESTINATION,
    )
    assert not source.header  # a client's header never picks the pod
    (fallback,) = override.fallback_policy.policies
    assert fallback.typed_extension_config.name == f"envoy.load_balancing_policies.{policy}"


def test_the_filter_fails_open_keeps_the_drawn_route_and_sends_no_body():
    built = picked()
    names_in_order = [f.name for f in filters(built)]
    assert names_in_order[-2:] == [EXT_PROC, "envoy.filters.http.router"]
    config = ext_proc_pb2.ExternalProcessor()
    filters(built)[-2].typed_config.Unpack(config)
    assert config.failure_mode_allow
    assert config.grpc_service.envoy_grpc.cluster_name == names.PICKER_CLUSTER
    assert config.route_cache_action == ext_proc_pb2.ExternalProcessor.RETAIN
    mode = processing_mode_pb2.ProcessingMode
    assert config.processing_mode.request_body_mode == mode.NONE
    assert config.processing_mode.response_header_mode == mode.SEND  # counted in flight to the first byte
    assert not config.grpc_service.HasField("timeout")  # it would bound the whole stream


def listener_manager(resources) -> hcm_pb2.HttpConnectionManager:
    manager = hcm_pb2.HttpConnectionManager()
    resources.listeners[0].filter_chains[0].filters[0].typed_config.Unpack(manager)
    return manager


def test_the_picker_the_gateway_serves_is_checked_over_http_and_told_each_picks_end_in_a_log():
    served = {**PICKER, "serve": True}
    built = build(
        envoy_picker=served,
        retries={"fallback": None},
        routing={"weights": {"baseline": 100}, "affinity": [{"header": "X-User"}]},
    )
    config = ext_authz_pb2.ExtAuthz()
    filters(built)[-2].typed_config.Unpack(config)
    assert filters(built)[-2].name == picker_checks.EXT_AUTHZ
    assert config.failure_mode_allow
    assert [m.exact for m in config.allowed_headers.patterns] == ["x-request-id", "x-user"]
    assert config.http_service.server_uri.cluster == names.PICKER_CLUSTER
    answer = config.http_service.authorization_response.dynamic_metadata_from_headers.patterns
    assert [m.exact for m in answer] == [names.EPP_DESTINATION]
    (host,) = built.routes[0].virtual_hosts
    off = ext_authz_pb2.ExtAuthzPerRoute()
    host.typed_per_filter_config[picker_checks.EXT_AUTHZ].Unpack(off)
    assert off.disabled
    for route in routes_of(built):
        for weighted in route.route.weighted_clusters.clusters:
            on = ext_authz_pb2.ExtAuthzPerRoute()
            weighted.typed_per_filter_config[picker_checks.EXT_AUTHZ].Unpack(on)
            assert on.check_settings.http_service.path_prefix == f"/{weighted.name}"
    override = override_host_pb2.OverrideHost()
    (chosen,) = cluster(built, "baseline").load_balancing_policy.policies
    chosen.typed_extension_config.typed_config.Unpack(override)
    assert override.override_host_sources[0].metadata.key == picker_checks.NAMESPACE
    dialled = cluster(built, names.PICKER_CLUSTER)
    options = http_protocol_options_pb2.HttpProtocolOptions()
    dialled.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].Unpack(
        options
    )
    assert options.explicit_http_config.HasField("http_protocol_options")  # HTTP/1.1, not gRPC
    (_, log) = listener_manager(built).access_log
    assert log.filter.metadata_filter.matcher.filter == picker_checks.NAMESPACE  # picked requests alone
    picks = als_pb2.HttpGrpcAccessLogConfig()
    log.typed_config.Unpack(picks)
    assert picks.common_config.log_name == names.PICKER_LOG
    assert picks.common_config.grpc_service.envoy_grpc.cluster_name == names.XDS_CLUSTER  # the answer log's
    assert picks.common_config.buffer_size_bytes.value == 0  # each entry sent as its request ends
    assert len(listener_manager(picked()).access_log) == 1  # a user's picker is told by the answer's headers


def test_only_the_splits_weighted_clusters_ask_naming_their_variant():
    built = picked()
    (host,) = built.routes[0].virtual_hosts
    off = ext_proc_pb2.ExtProcPerRoute()
    host.typed_per_filter_config[EXT_PROC].Unpack(off)
    assert off.disabled
    for route in routes_of(built):
        for weighted in route.route.weighted_clusters.clusters:
            on = ext_proc_pb2.ExtProcPerRoute()
            weighted.typed_per_filter_config[EXT_PROC].Unpack(on)
            assert not on.disabled
            assert on.overrides.failure_mode_allow.value
            (variant,) = on.overrides.grpc_initial_metadata
            assert (variant.key, variant.value) == (names.ROUTED_HEADER, weighted.name)
    assert not any(
        EXT_PROC in r.typed_per_filter_config for r in host.routes if not r.route.weighted_clusters
    )


@pytest.mark.parametrize(
    ("picker", "kind", "tls"),
    [
        (PICKER, cluster_pb2.Cluster.STATIC, False),
        ({"host": "epp.serving", "port": 9002}, cluster_pb2.Cluster.STRICT_DNS, True),
    ],
)
def test_the_pickers_cluster_dials_its_address(picker, kind, tls):
    built = build(envoy_picker=picker, retries={"fallback": None})
    dialled = cluster(built, names.PICKER_CLUSTER)
    assert dialled.type == kind
    assert dialled.HasField("transport_socket") == tls
    if tls:
        context = tls_pb2.UpstreamTlsContext()
        dialled.transport_socket.typed_config.Unpack(context)
        assert list(context.common_tls_context.alpn_protocols) == ["h2"]


def test_without_a_picker_nothing_asks_one():
    built = build()
    assert EXT_PROC not in [f.name for f in filters(built)]
    assert names.PICKER_CLUSTER not in [c.name for c in built.clusters]
    assert not cluster(built, "baseline").HasField("load_balancing_policy")
