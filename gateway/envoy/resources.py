"""Pure builders: rollout spec + endpoints -> Envoy Listener, RouteConfiguration, Cluster, CLA protos.

No I/O here. Known Envoy 1.40 traps these builders avoid (../shared/research/xds_control_plane.md):
route timeout defaults to 15 s (cuts streams), retries stay on the weighted cluster first picked
(hence the aggregate fallback cluster), a one-host cluster whose host is ejected goes into panic
routing and keeps sending to it, health checks slow to 60 s when a cluster has no traffic, and
the cluster circuit breaker allows only 3 concurrent retries by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.clusters.aggregate.v3 import cluster_pb2 as aggregate_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.retry.priority.previous_priorities.v3 import previous_priorities_config_pb2
from envoy.type.matcher.v3 import string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from gateway.envoy import names
from gateway.envoy.common import ads_config_source, any_proto, circuit_breakers, duration, socket_address
from gateway.envoy.faults import (
    Fault,
    build_fault_listener,
    build_fault_route,
    build_faulted_load_assignment,
    build_unfaulted_cluster,
)
from gateway.rollout.spec import RolloutSpec
from gateway.xds import types

EndpointMap = Mapping[str, Sequence[tuple[str, int]]]  # variant -> [(ip, port)]


@dataclass(frozen=True)
class ListenerAddress:
    host: str = "127.0.0.1"
    port: int = 8080


@dataclass(frozen=True)
class EnvoyResources:
    clusters: list[cluster_pb2.Cluster]
    endpoints: list[endpoint_pb2.ClusterLoadAssignment]
    listeners: list[listener_pb2.Listener]
    routes: list[route_pb2.RouteConfiguration]

    def by_type(self) -> dict[str, list]:
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
    clusters = [build_variant_cluster(spec, variant) for variant in spec.variants]
    fallback = spec.retries.fallback
    if fallback is not None:
        clusters += [
            build_fallback_cluster(variant, fallback) for variant in spec.variants if variant != fallback
        ]
    if spec.routing.mirror is not None:
        clusters.append(build_shadow_cluster(spec.routing.mirror.variant))
    clusters += [build_unfaulted_cluster(variant) for variant in faulted]
    return EnvoyResources(
        clusters=clusters,
        endpoints=[
            build_faulted_load_assignment(v, endpoints[v])
            if v in faulted
            else build_load_assignment(v, endpoints[v])
            for v in spec.variants
        ]
        + [build_load_assignment(names.unfaulted_cluster(v), endpoints[v]) for v in faulted],
        listeners=[build_listener(listen)] + [build_fault_listener(v) for v in faulted],
        routes=[build_route_config(spec)] + [build_fault_route(v, fault) for v, fault in faulted.items()],
    )


def build_variant_cluster(spec: RolloutSpec, variant: str) -> cluster_pb2.Cluster:
    """An EDS cluster per variant, health-checked on the server's readiness path.

    `ignore_health_on_host_removal`: a pod that left the endpoints (a terminating pod, a scale-down) is
    dropped at once, not kept for as long as it still passes Envoy's own health checks.

    Variants other than the fallback get no panic routing: with one host per variant, panic would
    keep sending traffic to an ejected host; without it the aggregate cluster moves that traffic to
    the fallback. The fallback itself keeps Envoy's panic default so it is never black-holed by its
    own health checks.
    """
    hc = spec.health_check
    cluster = cluster_pb2.Cluster(
        name=variant,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ads_config_source()),
        connect_timeout=duration(1.0),
        lb_policy=cluster_pb2.Cluster.ROUND_ROBIN,
        health_checks=[
            health_check_pb2.HealthCheck(
                timeout=duration(hc.timeout),
                interval=duration(hc.interval),
                no_traffic_interval=duration(hc.interval),
                unhealthy_threshold=wrappers_pb2.UInt32Value(value=hc.unhealthy_threshold),
                healthy_threshold=wrappers_pb2.UInt32Value(value=hc.healthy_threshold),
                http_health_check=health_check_pb2.HealthCheck.HttpHealthCheck(path=hc.path),
            )
        ],
        circuit_breakers=circuit_breakers(),
        ignore_health_on_host_removal=True,
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


def build_shadow_cluster(variant: str) -> cluster_pb2.Cluster:
    """Where mirrored requests go: the variant's own endpoints (its EDS resource, shared by name) under
    a cluster of their own, so the shadow traffic's answers are counted apart from the routed
    traffic's (Envoy discards them). No health checks and no outlier detection: a copy sent to a pod
    that is down must fail where the analysis sees it, not vanish as "no healthy upstream"."""
    return cluster_pb2.Cluster(
        name=names.shadow_cluster(variant),
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(
            eds_config=ads_config_source(), service_name=variant
        ),
        connect_timeout=duration(1.0),
        lb_policy=cluster_pb2.Cluster.ROUND_ROBIN,
        circuit_breakers=circuit_breakers(),
    )


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
    )


def build_load_assignment(
    variant: str, hosts: Sequence[tuple[str, int]]
) -> endpoint_pb2.ClusterLoadAssignment:
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=variant,
        endpoints=[
            endpoint_components_pb2.LocalityLbEndpoints(
                lb_endpoints=[
                    endpoint_components_pb2.LbEndpoint(
                        endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port))
                    )
                    for host, port in hosts
                ]
            )
        ],
    )


def build_listener(listen: ListenerAddress) -> listener_pb2.Listener:
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=names.HCM_STAT_PREFIX,
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        rds=hcm_pb2.Rds(config_source=ads_config_source(), route_config_name=names.ROUTE_CONFIG),
        http_filters=[
            hcm_pb2.HttpFilter(name="envoy.filters.http.router", typed_config=any_proto(router_pb2.Router()))
        ],
    )
    return listener_pb2.Listener(
        name=names.LISTENER,
        address=socket_address(listen.host, listen.port),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    listener_components_pb2.Filter(
                        name="envoy.filters.network.http_connection_manager", typed_config=any_proto(manager)
                    )
                ]
            )
        ],
    )


def cluster_for(spec: RolloutSpec, variant: str) -> str:
    """The cluster a route names for `variant`: its fallback aggregate when one is configured."""
    fallback = spec.retries.fallback
    if fallback is None or variant == fallback:
        return variant
    return names.fallback_cluster(variant)


def _route_action(spec: RolloutSpec, split: Mapping[str, int]) -> route_components_pb2.RouteAction:
    """The split's weighted clusters; a mirror copies the requests of a split that gives its variant
    nothing (a segment already routed to the variant is not sent to it twice)."""
    mirror = spec.routing.mirror
    mirrors = []
    if mirror is not None and mirror.percent > 0 and split.get(mirror.variant, 0) == 0:
        mirrors.append(
            route_components_pb2.RouteAction.RequestMirrorPolicy(
                cluster=names.shadow_cluster(mirror.variant),
                runtime_fraction=base_pb2.RuntimeFractionalPercent(
                    default_value=percent_pb2.FractionalPercent(
                        numerator=mirror.percent, denominator=percent_pb2.FractionalPercent.HUNDRED
                    )
                ),
            )
        )
    return route_components_pb2.RouteAction(
        request_mirror_policies=mirrors,
        weighted_clusters=route_components_pb2.WeightedCluster(
            clusters=[
                route_components_pb2.WeightedCluster.ClusterWeight(
                    name=cluster_for(spec, variant), weight=wrappers_pb2.UInt32Value(value=weight)
                )
                for variant, weight in sorted(split.items())
                if weight > 0
            ]
        ),
        timeout=duration(spec.timeouts.request),
        retry_policy=_retry_policy(spec),
    )


def _retry_policy(spec: RolloutSpec) -> route_components_pb2.RetryPolicy:
    policy = route_components_pb2.RetryPolicy(
        retry_on=spec.retries.on,
        num_retries=wrappers_pb2.UInt32Value(value=spec.retries.attempts),
    )
    if spec.timeouts.first_byte is not None:
        # Envoy's idle timeout bounds every gap between bytes, not only the first: it means "first
        # byte" because the model servers ping a started stream while it waits for a token
        # (inference/server/keepalive.py), so only an attempt that has not answered at all is cut.
        policy.per_try_idle_timeout.CopyFrom(duration(spec.timeouts.first_byte))
    if spec.retries.fallback is not None:
        policy.retry_priority.CopyFrom(
            route_components_pb2.RetryPolicy.RetryPriority(
                name="envoy.retry_priorities.previous_priorities",
                typed_config=any_proto(
                    previous_priorities_config_pb2.PreviousPrioritiesConfig(update_frequency=1)
                ),
            )
        )
    return policy


def _segment_header(segment: str) -> base_pb2.HeaderValueOption:
    """`x-graystack-segment: <segment>` on every request a route forwards (and its mirrored copy),
    replacing any a client sent: the model servers label their latency histograms with it, so the
    rollout compares variants only on segments split at random (gateway/rollout/plan.py)."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=names.SEGMENT_HEADER, value=segment),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def build_route_config(spec: RolloutSpec) -> route_pb2.RouteConfiguration:
    """Exact-match header rules first, each its own split; then the default weighted split."""
    header = spec.routing.header
    routes = [
        route_components_pb2.Route(
            name=f"{header.lower()}={rule.value}",
            match=route_components_pb2.RouteMatch(
                prefix="/",
                headers=[
                    route_components_pb2.HeaderMatcher(
                        name=header, string_match=string_pb2.StringMatcher(exact=rule.value)
                    )
                ],
            ),
            route=_route_action(spec, rule.split()),
            request_headers_to_add=[_segment_header(rule.value)],
        )
        for rule in spec.routing.rules
    ]
    routes.append(
        route_components_pb2.Route(
            name="default",
            match=route_components_pb2.RouteMatch(prefix="/"),
            route=_route_action(spec, spec.routing.weights),
            request_headers_to_add=[_segment_header(names.DEFAULT_SEGMENT)],
        )
    )
    return route_pb2.RouteConfiguration(
        name=names.ROUTE_CONFIG,
        virtual_hosts=[
            route_components_pb2.VirtualHost(name=names.VIRTUAL_HOST, domains=["*"], routes=routes)
        ],
    )
