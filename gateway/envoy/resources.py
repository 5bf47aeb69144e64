"""Pure builders: rollout spec + endpoints -> Envoy Listener, RouteConfiguration, Cluster, CLA protos.
The routes are gateway/envoy/routes.py's, the listener's local replies gateway/envoy/local_replies.py's.

No I/O here. Known Envoy 1.40 traps these builders avoid (docs/architecture.md):
route timeout defaults to 15 s (cuts streams), retries stay on the weighted cluster first picked
(hence the aggregate fallback cluster), a one-host cluster whose host is ejected goes into panic
routing and keeps sending to it, health checks slow to 60 s when a cluster has no traffic, and
the cluster circuit breaker allows only 3 concurrent retries by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.clusters.aggregate.v3 import cluster_pb2 as aggregate_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2
from google.protobuf.message import Message

from gateway import names
from gateway.envoy.affinity_filter import build_affinity_filters
from gateway.envoy.answer_filter import build_answer_filter
from gateway.envoy.answer_log import build_answer_log
from gateway.envoy.api_routes import baseline_variant
from gateway.envoy.balancing import load_balancing
from gateway.envoy.capture import build_request_filter
from gateway.envoy.common import (
    ads_config_source,
    any_proto,
    circuit_breakers,
    duration,
    http_listener,
    server_connections,
    socket_address,
)
from gateway.envoy.faults import (
    Fault,
    build_fault_listener,
    build_fault_route,
    build_faulted_load_assignment,
    build_unfaulted_cluster,
)
from gateway.envoy.local_replies import build_local_reply_config
from gateway.envoy.picker_checks import build_picker_log
from gateway.envoy.picking import build_picker_cluster, build_picker_filter, picked_balancing
from gateway.envoy.routes import build_route_config
from gateway.envoy.shadow import build_shadow_hop_cluster, build_shadow_listener
from gateway.envoy.variant_header import variant_metadata
from gateway.spec.affinity import cohort_header
from gateway.spec.envoy_picker import EnvoyPicker
from gateway.spec.model import RolloutSpec, Routing
from gateway.spec.quality import Quality
from gateway.xds import types

EndpointMap = Mapping[str, Sequence[tuple[str, int]]]  # variant -> [(ip, port)]


@dataclass(frozen=True)
class ListenerAddress:
    """What a proxy's bootstrap says of its listener (its node metadata, gateway/envoy/bootstrap.py):
    where it binds, and the bootstrap cluster its answer log reports on."""

    host: str = "127.0.0.1"
    port: int = 8080
    answer_log_cluster: str = names.XDS_CLUSTER


@dataclass(frozen=True)
class EnvoyResources:
    clusters: list[cluster_pb2.Cluster]
    endpoints: list[endpoint_pb2.ClusterLoadAssignment]
    listeners: list[listener_pb2.Listener]
    routes: list[route_pb2.RouteConfiguration]

    def by_type(self) -> dict[str, list[Message]]:
        """Keyed by xDS type URL, as the snapshot cache takes them."""
        return {
            types.CLUSTER: self.clusters,
            types.ENDPOINT: self.endpoints,
            types.LISTENER: self.listeners,
            types.ROUTE: self.routes,
        }


def build_resources(
    spec: RolloutSpec,
    endpoints: EndpointMap,
    listen: ListenerAddress,
    faults: Mapping[str, Fault] | None = None,
) -> EnvoyResources:
    """`faults`: variant -> what it suffers; a variant with a fault leads through its fault hop
    (gateway/envoy/faults.py), one without (or with a fault that does nothing) straight to its pods."""
    missing = sorted(set(spec.variants) - set(endpoints))
    if missing:
        raise ValueError(f"no endpoints known for variant(s) {missing}")
    faulted = {v: f for v, f in (faults or {}).items() if v in spec.variants and f.active}
    policy = {variant: v.load_balancing for variant, v in spec.variants.items()}
    clusters = [build_variant_cluster(spec, variant) for variant in spec.variants]
    fallback = spec.retries.fallback
    if fallback is not None:
        clusters += [
            build_fallback_cluster(variant, fallback) for variant in spec.variants if variant != fallback
        ]
    shadows = []
    if spec.routing.mirror is not None:
        mirrored = spec.routing.mirror.variant
        clusters += [build_shadow_cluster(mirrored, policy[mirrored]), build_shadow_hop_cluster(mirrored)]
        shadows.append(build_shadow_listener(spec, mirrored, listen.answer_log_cluster))
    models = baseline_variant(spec)
    clusters.append(build_models_cluster(models, policy[models]))
    clusters += [build_unfaulted_cluster(variant, policy[variant]) for variant in faulted]
    if spec.envoy_picker is not None:
        clusters.append(build_picker_cluster(spec.envoy_picker))
    return EnvoyResources(
        clusters=clusters,
        endpoints=[
            build_faulted_load_assignment(v, endpoints[v])
            if v in faulted
            else build_load_assignment(v, endpoints[v])
            for v in spec.variants
        ]
        + [build_load_assignment(v, endpoints[v], names.unfaulted_cluster(v)) for v in faulted],
        listeners=[build_listener(listen, spec.routing, spec.analysis.quality, spec.envoy_picker), *shadows]
        + [build_fault_listener(v) for v in faulted],
        routes=[build_route_config(spec)] + [build_fault_route(v, fault) for v, fault in faulted.items()],
    )


def _health_checks(spec: RolloutSpec, variant: str) -> list[health_check_pb2.HealthCheck]:
    """The variant's active health check on its server's own path, or none (`health_check: null`)."""
    hc = spec.health_check_for(variant)
    if hc is None:
        return []
    return [
        health_check_pb2.HealthCheck(
            timeout=duration(hc.timeout),
            interval=duration(hc.interval),
            no_traffic_interval=duration(hc.interval),
            unhealthy_threshold=wrappers_pb2.UInt32Value(value=hc.unhealthy_threshold),
            healthy_threshold=wrappers_pb2.UInt32Value(value=hc.healthy_threshold),
            http_health_check=health_check_pb2.HealthCheck.HttpHealthCheck(path=hc.path),
        )
    ]


def build_variant_cluster(spec: RolloutSpec, variant: str) -> cluster_pb2.Cluster:
    """An EDS cluster per variant, health-checked on the server's health path unless the spec turns it off
    (a host with no health check counts as healthy; outlier detection still ejects it on 5xx).

    `ignore_health_on_host_removal`: a pod that left the endpoints (a terminating pod, a scale-down) is
    dropped at once, not kept for as long as it still passes Envoy's own health checks.

    Variants other than the fallback get no panic routing: with one host per variant, panic would
    keep sending traffic to an ejected host; without it the aggregate cluster moves that traffic to
    the fallback. The fallback itself keeps Envoy's panic default so it is never black-holed by its
    own health checks.

    With an `envoy_picker`, the pod is the picker's where it gave one of the cluster's, else the variant's
    own policy's (gateway/envoy/picking.py).
    """
    policy = spec.variants[variant].load_balancing
    cluster = cluster_pb2.Cluster(
        name=variant,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ads_config_source()),
        connect_timeout=duration(1.0),
        **(
            picked_balancing(policy, spec.envoy_picker)
            if spec.envoy_picker is not None
            else load_balancing(policy)
        ),
        health_checks=_health_checks(spec, variant),
        circuit_breakers=circuit_breakers(),
        metadata=variant_metadata(variant),
        ignore_health_on_host_removal=True,
        **server_connections(),
    )
    od = spec.outlier_detection
    if od is not None:
        cluster.outlier_detection.CopyFrom(
            outlier_detection_pb2.OutlierDetection(
                consecutive_5xx=wrappers_pb2.UInt32Value(value=od.consecutive_5xx),
                interval=duration(od.interval),
                base_ejection_time=duration(od.base_ejection_time),
                max_ejection_percent=wrappers_pb2.UInt32Value(value=100),
                successful_active_health_check_uneject_host=wrappers_pb2.BoolValue(value=False),
            )
        )
    if variant != spec.retries.fallback:
        cluster.common_lb_config.healthy_panic_threshold.CopyFrom(percent_pb2.Percent(value=0.0))
    return cluster


def _endpoints_of(variant: str, name: str, policy: str) -> cluster_pb2.Cluster:
    """A cluster `name` over `variant`'s endpoints (its EDS resource, shared by name), with stats of its own,
    balanced by the variant's `policy` (gateway/envoy/balancing.py)."""
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(
            eds_config=ads_config_source(), service_name=variant
        ),
        connect_timeout=duration(1.0),
        **load_balancing(policy),
        circuit_breakers=circuit_breakers(),
        metadata=variant_metadata(variant),
        **server_connections(),
    )


def build_shadow_cluster(variant: str, policy: str) -> cluster_pb2.Cluster:
    """Where mirrored requests go: the variant's own endpoints under a cluster of their own, so the shadow
    traffic's answers are counted apart from the routed traffic's (Envoy discards them). No health checks
    and no outlier detection: a copy sent to a pod that is down must fail where the analysis sees it, not
    vanish as "no healthy upstream"."""
    return _endpoints_of(variant, names.shadow_cluster(variant), policy)


def build_models_cluster(variant: str, policy: str) -> cluster_pb2.Cluster:
    """Where `GET /v1/models` goes (gateway/envoy/routes.py): the baseline's endpoints, counted apart from
    its inference traffic so the analysis never reads them. No health checks of its own (the variant's
    cluster has them); the route retries a refused connection on another pod."""
    return _endpoints_of(variant, names.models_cluster(variant), policy)


def build_fallback_cluster(variant: str, fallback: str) -> cluster_pb2.Cluster:
    """Aggregate cluster: priority 0 is the variant, priority 1 the fallback.

    With the route's previous-priorities retry, a failed attempt on the variant retries on the
    fallback; an ejected or unhealthy variant sends its share to the fallback outright. Clients see
    the fallback's answer, so the variant's failures must be read from this cluster's retries:
    `upstream_rq_retry` counts every retried attempt (refused connections and per-try timeouts carry
    no response code, so `retry.upstream_rq_<code>` misses them), and the variant's own cluster
    counts the attempts that reached it (gateway/metrics/direct.py reads them so).
    """
    return cluster_pb2.Cluster(
        name=names.fallback_cluster(variant),
        connect_timeout=duration(1.0),
        lb_policy=cluster_pb2.Cluster.CLUSTER_PROVIDED,
        cluster_type=cluster_pb2.Cluster.CustomClusterType(
            name="envoy.clusters.aggregate",
            typed_config=any_proto(aggregate_pb2.ClusterConfig(clusters=[variant, fallback])),
        ),
        circuit_breakers=circuit_breakers(),
        metadata=variant_metadata(variant),
    )


def build_load_assignment(
    variant: str, hosts: Sequence[tuple[str, int]], cluster: str | None = None
) -> endpoint_pb2.ClusterLoadAssignment:
    """The variant's hosts (for `cluster`, default the variant's own), each naming its variant in its
    metadata (gateway/envoy/variant_header.py)."""
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=cluster or variant,
        endpoints=[
            endpoint_components_pb2.LocalityLbEndpoints(
                lb_endpoints=[
                    endpoint_components_pb2.LbEndpoint(
                        endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port)),
                        metadata=variant_metadata(variant),
                    )
                    for host, port in hosts
                ]
            )
        ],
    )


def build_listener(
    listen: ListenerAddress,
    routing: Routing | None = None,
    quality: Quality | None = None,
    picker: EnvoyPicker | None = None,
) -> listener_pb2.Listener:
    """The ingress: the affinity filters first where the spec's `routing` wants them
    (gateway/envoy/affinity_filter.py), the request-side capture where it has `analysis.quality`
    (gateway/envoy/capture.py), the answer filter (capturing then too), the picker's filter where the
    spec has an `envoy_picker` (gateway/envoy/picking.py), the router."""
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=names.HCM_STAT_PREFIX,
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        # `/v1/../metrics` and `//metrics` are `/metrics` before any route matches (gateway/envoy/api_routes.py)
        normalize_path=wrappers_pb2.BoolValue(value=True),
        merge_slashes=True,
        rds=hcm_pb2.Rds(config_source=ads_config_source(), route_config_name=names.ROUTE_CONFIG),
        http_filters=[
            *(build_affinity_filters(routing) if routing is not None else []),
            *build_request_filter(quality),
            build_answer_filter(capture=quality is not None),
            *(
                [build_picker_filter(picker, cohort_header(routing.affinity) if routing else None)]
                if picker is not None
                else []
            ),
            hcm_pb2.HttpFilter(name="envoy.filters.http.router", typed_config=any_proto(router_pb2.Router())),
        ],
        local_reply_config=build_local_reply_config(),
        access_log=[
            build_answer_log(listen.answer_log_cluster),
            *([build_picker_log(listen.answer_log_cluster)] if picker is not None and picker.serve else []),
        ],
    )
    return http_listener(names.LISTENER, manager, socket_address(listen.host, listen.port))
