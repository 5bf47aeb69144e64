"""Gateway API objects into the Envoy resources Envoy Gateway programs for them, for the test-only
reference gateway (tests/support/reference_gateway.py says what it stands in for and what it leaves out).
Pure: the objects one look at the API read, in; the Listener, RouteConfiguration and Clusters, and what
each HTTPRoute came to (its generation, its weights, its unresolved references), out.

Names follow Envoy Gateway's: a cluster per backendRef, `httproute/<ns>/<name>/rule/<i>/backend/<j>`, so
whoever reads Envoy's stats or access log finds the backend a request went to by name. A bug (`Bug`) bends
what is programmed the way some real gateways have, while the route's status says all is well.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2, grpc_service_pb2, protocol_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf.message import Message

from gateway import names
from gateway.envoy.common import ads_config_source, any_proto, duration
from gateway.xds import types
from tests.support.reference_backends import Endpoints, Key, Objects, Unresolved, is_pool, key, resolve

CORE_GROUP = "gateway.networking.k8s.io"
ALS_CLUSTER = "accesslog/als"
ALS_FLUSH_S = 0.1  # short, so a test sees its answers logged within a look or two

Weights = tuple[tuple[int, ...], ...]  # per rule, per backendRef


class Bug(enum.Enum):
    """How the reference gateway misbehaves, as real gateways have, each while reporting `Accepted`
    (but ACCEPTED_LATE and NEVER_ACCEPTED, which are about that report)."""

    NONE = "none"
    ACCEPTED_LATE = "accepted-late"  # the status written `lag` seconds after the data plane changed
    PROGRAMMED_LATE = "programmed-late"  # the status written at once, the data plane changed `lag` s later
    NEVER_ACCEPTED = "never-accepted"  # the status never written past the first generation seen
    IGNORES_WEIGHTS = "ignores-weights"  # every generation Accepted, the first weights served
    FIRST_BACKEND_ONLY = "first-backend-only"  # every rule's traffic to its first backendRef
    ONE_POOL_FOR_RULE = "one-pool-for-rule"  # istio#61594: a rule over pools served by the first one's pods


@dataclass(frozen=True)
class Listen:
    """The Gateway served, where its one listener binds, and where its access log goes (None: nowhere)."""

    gateway: Key
    port: int
    als: str | None = None  # host:port of a gRPC access-log service (the EnvoyProxy ALS sink)
    log_name: str = names.ANSWER_LOG
    headers: tuple[str, ...] = ()  # request headers the log carries (the ALS sink's `http.requestHeaders`)

    @property
    def name(self) -> str:
        return f"{self.gateway[0]}/{self.gateway[1]}/http"


@dataclass
class Outcome:
    """What one HTTPRoute came to: the generation translated, the weights it asked for, and the
    references that did not resolve."""

    generation: int
    weights: Weights
    unresolved: list[Unresolved] = field(default_factory=list)


@dataclass(frozen=True)
class Translation:
    resources: dict[str, list[Message]]  # xDS type URL -> resources
    outcomes: dict[Key, Outcome]  # each HTTPRoute the gateway serves


def parent_refs(route: Mapping[str, Any], gateway: Key) -> list[dict[str, Any]]:
    """The route's parentRefs that name `gateway` (any section or port of it)."""
    namespace = route["metadata"]["namespace"]
    return [
        ref
        for ref in route["spec"].get("parentRefs", [])
        if (ref.get("group", CORE_GROUP), ref.get("kind", "Gateway")) == (CORE_GROUP, "Gateway")
        and (ref.get("namespace", namespace), ref["name"]) == gateway
    ]


def translate(
    objects: Objects, listen: Listen, bug: Bug = Bug.NONE, first_weights: Mapping[Key, Weights] | None = None
) -> Translation:
    """The resources for every route that names the gateway; `first_weights`: each route's weights as
    first programmed, which Bug.IGNORES_WEIGHTS keeps serving."""
    entries: list[tuple[tuple[Any, ...], route_components_pb2.Route]] = []
    clusters: list[Message] = []
    outcomes: dict[Key, Outcome] = {}
    for route in objects.routes:
        if not parent_refs(route, listen.gateway):
            continue
        rules = route["spec"].get("rules", [])
        asked = tuple(tuple(ref.get("weight", 1) for ref in rule.get("backendRefs", [])) for rule in rules)
        outcome = Outcome(route["metadata"].get("generation", 1), asked)
        kept = (first_weights or {}).get(key(route), ()) if bug is Bug.IGNORES_WEIGHTS else ()
        for index, rule in enumerate(rules):
            first = _kept(kept, index)
            weights = first if len(first) == len(asked[index]) else asked[index]
            action, made = _rule(route, index, rule, weights, objects, bug, outcome)
            clusters += made
            for number, match in enumerate(rule.get("matches") or [{}]):  # none: every request
                entry = _route(route, index, number, match, action)
                entries.append((_precedence(route, index, number, match), entry))
        outcomes[key(route)] = outcome
    if listen.als is not None:
        clusters.append(_als_cluster(listen.als))
    entries.sort(key=lambda entry: entry[0])
    host = route_components_pb2.VirtualHost(
        name=f"{listen.name}/*", domains=["*"], routes=[entry for _, entry in entries]
    )
    resources: dict[str, list[Message]] = {
        types.CLUSTER: clusters,
        types.LISTENER: [_listener(listen)],
        types.ROUTE: [route_pb2.RouteConfiguration(name=listen.name, virtual_hosts=[host])],
    }
    return Translation(resources, outcomes)


def _kept(weights: Weights, index: int) -> tuple[int, ...]:
    """A rule's weights as first programmed (none where the route then had fewer rules)."""
    return weights[index] if index < len(weights) else ()


def _precedence(
    route: Mapping[str, Any], rule: int, number: int, match: Mapping[str, Any]
) -> tuple[Any, ...]:
    """Gateway API's order among matches: an exact path, the longest path, a method, the most headers,
    the most query parameters; then the oldest route, its namespace/name, and the rule's order."""
    path = match.get("path", {"type": "PathPrefix", "value": "/"})
    meta = route["metadata"]
    return (
        {"Exact": 0, "PathPrefix": 1}.get(path["type"], 2),
        -len(path["value"]),
        0 if match.get("method") else 1,
        -len(match.get("headers", [])),
        -len(match.get("queryParams", [])),
        meta.get("creationTimestamp", ""),
        *key(route),
        rule,
        number,
    )


def _rule(
    route: Mapping[str, Any],
    index: int,
    rule: Mapping[str, Any],
    weights: Sequence[int],
    objects: Objects,
    bug: Bug,
    outcome: Outcome,
) -> tuple[route_components_pb2.RouteAction | None, list[Message]]:
    """The rule's action (None: answer 500, as Gateway API says where no backend can take a request)
    and its clusters, one per backendRef and one per mirror."""
    namespace, name = key(route)
    prefix = f"httproute/{namespace}/{name}/rule/{index}"
    refs = rule.get("backendRefs", [])
    found = [resolve(ref, namespace, objects) for ref in refs]
    outcome.unresolved += [f for f in found if isinstance(f, Unresolved)]
    if bug is Bug.ONE_POOL_FOR_RULE:  # every pool's cluster gets the first pool's pods
        pools = [j for j, ref in enumerate(refs) if is_pool(ref) and not isinstance(found[j], Unresolved)]
        found = [found[pools[0]] if j in pools else f for j, f in enumerate(found)]
    if bug is Bug.FIRST_BACKEND_ONLY:
        weights = [1] + [0] * (len(refs) - 1)
    backends = [_cluster(f"{prefix}/backend/{j}", _addresses(f)) for j, f in enumerate(found)]
    live = [
        (cluster.name, weight)
        for cluster, weight, f in zip(backends, weights, found, strict=True)
        if weight > 0 and not isinstance(f, Unresolved)
    ]
    mirrors = [f["requestMirror"] for f in rule.get("filters", []) if f["type"] == "RequestMirror"]
    targets = [resolve(mirror["backendRef"], namespace, objects) for mirror in mirrors]
    outcome.unresolved += [t for t in targets if isinstance(t, Unresolved)]
    clusters: list[Message] = [*backends]
    if not live:
        return None, clusters
    action = route_components_pb2.RouteAction()
    if len(live) == 1:
        action.cluster = live[0][0]
    for cluster_name, weight in live if len(live) > 1 else ():
        action.weighted_clusters.clusters.add(name=cluster_name).weight.value = weight
    for number, (mirror, target) in enumerate(zip(mirrors, targets, strict=True)):
        if not isinstance(target, Unresolved):
            clusters.append(_cluster(f"{prefix}/mirror/{number}", target))
            action.request_mirror_policies.add(
                cluster=f"{prefix}/mirror/{number}", runtime_fraction=_fraction(mirror)
            )
    return action, clusters


def _addresses(found: Endpoints | Unresolved) -> Endpoints:
    """A backend that does not resolve gets a cluster with no endpoints: Envoy answers its share 503."""
    return [] if isinstance(found, Unresolved) else found


def _fraction(mirror: Mapping[str, Any]) -> base_pb2.RuntimeFractionalPercent:
    """A RequestMirror's `percent` or `fraction` (neither: every request), as Envoy's runtime fraction."""
    if "percent" in mirror:
        value = percent_pb2.FractionalPercent(numerator=mirror["percent"])
    elif "fraction" in mirror:
        share = mirror["fraction"]["numerator"] / mirror["fraction"].get("denominator", 100)
        value = percent_pb2.FractionalPercent(
            numerator=round(share * 1_000_000), denominator=percent_pb2.FractionalPercent.MILLION
        )
    else:
        value = percent_pb2.FractionalPercent(numerator=100)
    return base_pb2.RuntimeFractionalPercent(default_value=value)


def _route(
    route: Mapping[str, Any],
    rule: int,
    number: int,
    match: Mapping[str, Any],
    action: route_components_pb2.RouteAction | None,
) -> route_components_pb2.Route:
    namespace, name = key(route)
    entry = route_components_pb2.Route(
        name=f"httproute/{namespace}/{name}/rule/{rule}/match/{number}/*", match=_match(match)
    )
    if action is None:
        entry.direct_response.status = 500
    else:
        entry.route.CopyFrom(action)
    return entry


def _match(match: Mapping[str, Any]) -> route_components_pb2.RouteMatch:
    """A Gateway API match: a PathPrefix matches whole path segments (`/v1` takes `/v1/x`, not `/v1x`)."""
    path = match.get("path", {"type": "PathPrefix", "value": "/"})
    found = route_components_pb2.RouteMatch()
    if path["type"] == "Exact":
        found.path = path["value"]
    elif path["type"] == "RegularExpression":
        found.safe_regex.regex = path["value"]
    elif path["value"].rstrip("/"):
        found.path_separated_prefix = path["value"].rstrip("/")
    else:
        found.prefix = "/"
    for header in match.get("headers", []):
        found.headers.add(
            name=header["name"].lower(), string_match=_string(header.get("type", "Exact"), header["value"])
        )
    if match.get("method"):
        found.headers.add(name=":method", string_match=_string("Exact", match["method"]))
    for query in match.get("queryParams", []):
        found.query_parameters.add(
            name=query["name"], string_match=_string(query.get("type", "Exact"), query["value"])
        )
    return found


def _string(kind: str, value: str) -> string_pb2.StringMatcher:
    if kind == "RegularExpression":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=value))
    return string_pb2.StringMatcher(exact=value)


def _cluster(name: str, endpoints: Endpoints) -> cluster_pb2.Cluster:
    """STATIC, round robin: the addresses are the translator's to keep current, as EDS would."""
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.STATIC,
        connect_timeout=duration(1.0),
        lb_policy=cluster_pb2.Cluster.ROUND_ROBIN,
        load_assignment=endpoint_pb2.ClusterLoadAssignment(
            cluster_name=name,
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    lb_endpoints=[
                        endpoint_components_pb2.LbEndpoint(
                            endpoint=endpoint_components_pb2.Endpoint(address=_socket(ip, port))
                        )
                        for ip, port in endpoints
                    ]
                )
            ],
        ),
    )


def _socket(host: str, port: int) -> address_pb2.Address:
    return address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=port))


def _als_cluster(target: str) -> cluster_pb2.Cluster:
    """The access-log service's cluster: gRPC, so HTTP/2."""
    host, _, port = target.rpartition(":")
    cluster = _cluster(ALS_CLUSTER, [(host, int(port))])
    options = http_protocol_options_pb2.HttpProtocolOptions(
        explicit_http_config=http_protocol_options_pb2.HttpProtocolOptions.ExplicitHttpConfig(
            http2_protocol_options=protocol_pb2.Http2ProtocolOptions()
        )
    )
    cluster.typed_extension_protocol_options[
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ].CopyFrom(any_proto(options))
    return cluster


def _listener(listen: Listen) -> listener_pb2.Listener:
    """One HTTP listener whose routes come over ADS, logging every request where `listen.als` says."""
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=f"http-{listen.port}",
        rds=hcm_pb2.Rds(config_source=ads_config_source(), route_config_name=listen.name),
        http_filters=[
            hcm_pb2.HttpFilter(name="envoy.filters.http.router", typed_config=any_proto(router_pb2.Router()))
        ],
    )
    if listen.als is not None:
        log = als_pb2.HttpGrpcAccessLogConfig(
            common_config=als_pb2.CommonGrpcAccessLogConfig(
                log_name=listen.log_name,
                grpc_service=grpc_service_pb2.GrpcService(
                    envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=ALS_CLUSTER)
                ),
                transport_api_version=config_source_pb2.V3,
                buffer_flush_interval=duration(ALS_FLUSH_S),
            ),
            additional_request_headers_to_log=list(listen.headers),
        )
        manager.access_log.add(name="envoy.access_loggers.http_grpc", typed_config=any_proto(log))
    return listener_pb2.Listener(
        name=listen.name,
        address=_socket("127.0.0.1", listen.port),
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
