"""Mirrored copies measured as every answer is: a hop through an internal listener with the answer filter.

Why a hop (checked against Envoy 1.40 on loopback): the router sends a mirrored copy with an async client,
outside the listener's filter chain, and discards its answer unread, so neither the answer filter nor the
access log sees it; the Lua filter does load as an upstream filter on the shadow cluster, but what it
writes reaches no access log. So the mirror policy sends its copies to `<variant>-shadow-hop`, whose one
endpoint is the internal listener `graystack-shadow-<variant>`: a connection manager with the same answer
filter (gateway/envoy/answer_filter.py) and the answer log under its own name (`names.SHADOW_LOG`, so the
gateway knows the answers went to no client), routing on to `<variant>-shadow`, the variant's pods under
the cluster whose counters the analysis has always read for shadow traffic. Its routes are the API
table's split entries under their own names (gateway/envoy/api_routes.py), so each copy's answer is
measured as its API's (no first token for embeddings). The copy's route keeps no timeout of its own: the
mirror's (the outer route's) governs it, as for the fault hop.
"""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from gateway import names
from gateway.envoy.answer_filter import build_answer_filter
from gateway.envoy.answer_log import build_answer_log
from gateway.envoy.api_routes import entry_match, route_name, split_entries
from gateway.envoy.capture import build_request_filter, shadow_capture_metadata
from gateway.envoy.common import any_proto, circuit_breakers, duration, http_listener
from gateway.envoy.variant_header import served_headers, variant_metadata
from gateway.spec.model import RolloutSpec


def build_shadow_hop_cluster(variant: str) -> cluster_pb2.Cluster:
    """The mirror's target: one endpoint, the measuring listener (no health checks: it is always there)."""
    hop = endpoint_components_pb2.Endpoint(
        address=address_pb2.Address(
            envoy_internal_address=address_pb2.EnvoyInternalAddress(
                server_listener_name=names.shadow_listener(variant)
            )
        )
    )
    return cluster_pb2.Cluster(
        name=names.shadow_hop_cluster(variant),
        type=cluster_pb2.Cluster.STATIC,
        connect_timeout=duration(1.0),
        circuit_breakers=circuit_breakers(),
        metadata=variant_metadata(variant),
        load_assignment=endpoint_pb2.ClusterLoadAssignment(
            cluster_name=names.shadow_hop_cluster(variant),
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    lb_endpoints=[endpoint_components_pb2.LbEndpoint(endpoint=hop)]
                )
            ],
        ),
    )


def build_shadow_listener(spec: RolloutSpec, variant: str, answer_log_cluster: str) -> listener_pb2.Listener:
    """The internal listener that measures `variant`'s mirrored copies and forwards them to its pods,
    keeping their answers where the spec has `analysis.quality` (gateway/envoy/capture.py)."""
    quality = spec.analysis.quality
    forward = route_components_pb2.RouteAction(cluster=names.shadow_cluster(variant), timeout=duration(0))
    route = route_pb2.RouteConfiguration(
        name=names.shadow_listener(variant),
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name=names.shadow_listener(variant),
                domains=["*"],
                routes=[
                    route_components_pb2.Route(
                        name=route_name("shadow", entry),
                        match=entry_match(entry),
                        route=forward,
                        metadata=shadow_capture_metadata(quality),
                    )
                    for entry in split_entries(spec)
                ],
                response_headers_to_add=served_headers(),
            )
        ],
    )
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=names.shadow_listener(variant),
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        route_config=route,
        http_filters=[
            *build_request_filter(quality),
            build_answer_filter(capture=quality is not None),
            hcm_pb2.HttpFilter(name="envoy.filters.http.router", typed_config=any_proto(router_pb2.Router())),
        ],
        access_log=[build_answer_log(answer_log_cluster, names.SHADOW_LOG)],
    )
    return http_listener(names.shadow_listener(variant), manager)
