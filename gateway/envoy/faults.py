"""Pure builders for injected faults: a variant that fails a share of its attempts, or answers late.

Why a hop through an internal listener, and not a filter on the variant's cluster (checked against
Envoy 1.40 on loopback):
- the HTTP fault filter does not load as an upstream (cluster) filter; on the listener its aborts are
  local replies before routing, which no retry and no cluster stat sees;
- the Lua filter does load as an upstream filter, but its `respond()` there is neither retried nor
  counted as a response code (10 aborts on a route retrying 5xx: 10 client 503s, no retry, no
  `upstream_rq_503`); and a route through the aggregate cluster `<variant>-with-fallback` runs the
  aggregate's upstream filters, not the variant's, where a script cannot tell which member cluster an
  attempt goes to (its stream info has no upstream host).

So while a variant has a fault, its endpoints (its ClusterLoadAssignment) lead to an internal
listener, `graystack-fault-<variant>`, whose HTTP fault filter (configured on the hop's route) aborts a
share of the requests with the fault's status and delays each by its latency, and which forwards the
rest to the variant's pods through the cluster `<variant>-unfaulted`. To the proxy's router that is the
variant's own answer: each attempt is counted in the variant's cluster stats (`upstream_rq_total`,
`upstream_rq_<code>`, `upstream_rq_time`), a failed one is retried on the fallback like any 5xx, outlier
detection ejects it as it would a failing pod, and a delay past `timeouts.first_byte` is cut and retried
like a stalled pod. Without a fault there is no hop: the variant's endpoints are its pods, as ever.

Switching at once, both ways. A host Envoy has not seen before gets no traffic until its first active
health check passes (up to an interval with no healthy host: about a second at a 1 s interval, checked).
So the hop endpoints are not actively health-checked (`disable_active_health_check`: healthy at once),
and while faulted the pods stay in the assignment as they were, marked DRAINING by EDS: the same hosts,
still health-checked, only left out; clearing the fault drops the hop endpoints and the mark. DRAINING,
not UNHEALTHY: Envoy 1.40 leaves a draining host out of the cluster's health share too, where an
unhealthy one halves it and the aggregate cluster spills that share to the fallback (checked: about a
third of a faulted variant's traffic went to the baseline with no attempt on the variant). The fault
itself is the hop's route (RDS), so changing it acts on the next attempt; a changed listener would keep
serving its open connections under the old fault while it drained.

While faulted, a pod that dies is not seen by the variant's cluster (the hop endpoints are not checked):
its attempts fail at the hop as 503s, retried like any. With several pods the hop spreads its attempts
over all of them. An Envoy needs the `envoy.bootstrap.internal_listener` bootstrap extension
(gateway/envoy/bootstrap.py adds it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.common.fault.v3 import fault_pb2 as common_fault_pb2
from envoy.extensions.filters.http.fault.v3 import fault_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.v3 import percent_pb2

from gateway import names
from gateway.envoy.balancing import load_balancing
from gateway.envoy.common import (
    ads_config_source,
    any_proto,
    circuit_breakers,
    duration,
    http_listener,
    server_connections,
    socket_address,
)
from gateway.envoy.variant_header import variant_metadata

FAULT_FILTER = "envoy.filters.http.fault"


@dataclass(frozen=True)
class Fault:
    """What a variant suffers, per upstream attempt: a share `error_rate` answered `status` at once,
    and every attempt held `latency_ms` before it goes on (or before its abort). Its ranges are checked
    where it comes in, by the admin API's FaultChange (gateway/admin/protocol.py)."""

    error_rate: float = 0.0
    status: int = 503
    latency_ms: int = 0

    @property
    def active(self) -> bool:
        return self.error_rate > 0 or self.latency_ms > 0

    def describe(self) -> str:
        parts = []
        if self.error_rate > 0:
            parts.append(f"fails {self.error_rate:.1%} of attempts with {self.status}")
        if self.latency_ms > 0:
            parts.append(f"answers {self.latency_ms} ms late")
        return ", ".join(parts) or "no fault"


def _internal_address(variant: str, endpoint_id: str) -> address_pb2.Address:
    return address_pb2.Address(
        envoy_internal_address=address_pb2.EnvoyInternalAddress(
            server_listener_name=names.fault_listener(variant), endpoint_id=endpoint_id
        )
    )


def build_faulted_load_assignment(
    variant: str, hosts: Sequence[tuple[str, int]]
) -> endpoint_pb2.ClusterLoadAssignment:
    """A faulted variant's endpoints: one hop endpoint per pod (told apart by endpoint_id; healthy at
    once, never actively checked), and the pods themselves, draining by EDS but still checked, so
    clearing the fault gives the variant its pods back as they are."""
    hops = [
        endpoint_components_pb2.LbEndpoint(
            endpoint=endpoint_components_pb2.Endpoint(
                address=_internal_address(variant, f"{host}:{port}"),
                health_check_config=endpoint_components_pb2.Endpoint.HealthCheckConfig(
                    disable_active_health_check=True
                ),
            ),
            metadata=variant_metadata(variant),
        )
        for host, port in hosts
    ]
    pods = [
        endpoint_components_pb2.LbEndpoint(
            endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port)),
            health_status=health_check_pb2.DRAINING,
            metadata=variant_metadata(variant),
        )
        for host, port in hosts
    ]
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=variant,
        endpoints=[endpoint_components_pb2.LocalityLbEndpoints(lb_endpoints=hops + pods)],
    )


def build_unfaulted_cluster(variant: str, policy: str) -> cluster_pb2.Cluster:
    """Behind the hop: the variant's pods (their own EDS resource), no health checks, outlier detection
    or retries of its own; the variant's cluster in front of the hop keeps those. It balances by the
    variant's `policy`: this cluster, not the variant's (whose hosts are the hop endpoints), picks the pod."""
    return cluster_pb2.Cluster(
        name=names.unfaulted_cluster(variant),
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ads_config_source()),
        connect_timeout=duration(1.0),
        **load_balancing(policy),
        circuit_breakers=circuit_breakers(),
        **server_connections(),
    )


def _fault_filter(fault: Fault) -> fault_pb2.HTTPFault:
    config = fault_pb2.HTTPFault()
    if fault.error_rate > 0:
        config.abort.CopyFrom(
            fault_pb2.FaultAbort(
                http_status=fault.status,
                percentage=percent_pb2.FractionalPercent(
                    numerator=round(fault.error_rate * 1_000_000),
                    denominator=percent_pb2.FractionalPercent.MILLION,
                ),
            )
        )
    if fault.latency_ms > 0:
        config.delay.CopyFrom(
            common_fault_pb2.FaultDelay(
                fixed_delay=duration(fault.latency_ms / 1000),
                percentage=percent_pb2.FractionalPercent(numerator=100),
            )
        )
    return config


def build_fault_route(variant: str, fault: Fault) -> route_pb2.RouteConfiguration:
    """The hop's route: on to the variant's pods, with the fault as the fault filter's per-route config.
    A route (RDS) rather than a listener change, so a new fault acts on the next attempt: a changed
    listener would keep serving the connections already open to it, under the old fault, while it
    drains. No timeout of its own (Envoy's default of 15 s would cut streams): the outer route's
    timeouts govern each attempt."""
    route = route_components_pb2.Route(
        match=route_components_pb2.RouteMatch(prefix="/"),
        route=route_components_pb2.RouteAction(cluster=names.unfaulted_cluster(variant), timeout=duration(0)),
    )
    route.typed_per_filter_config[FAULT_FILTER].CopyFrom(any_proto(_fault_filter(fault)))
    return route_pb2.RouteConfiguration(
        name=names.fault_listener(variant),
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name=names.fault_listener(variant), domains=["*"], routes=[route]
            )
        ],
    )


def build_fault_listener(variant: str) -> listener_pb2.Listener:
    """The internal listener in front of a faulted variant's pods; the same whatever the fault (its
    route has it)."""
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=names.fault_listener(variant),
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        rds=hcm_pb2.Rds(config_source=ads_config_source(), route_config_name=names.fault_listener(variant)),
        http_filters=[
            hcm_pb2.HttpFilter(name=FAULT_FILTER, typed_config=any_proto(fault_pb2.HTTPFault())),
            hcm_pb2.HttpFilter(name="envoy.filters.http.router", typed_config=any_proto(router_pb2.Router())),
        ],
    )
    return http_listener(names.fault_listener(variant), manager)
