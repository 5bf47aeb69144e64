"""The match side of the route configuration, from the spec's API table (gateway/spec/apis.py), and the
routes that never reach a variant's split: the guards, the refused and pinned APIs, and unknown paths.

Their order in the virtual host (the first match wins; build_route_config in gateway/envoy/routes.py):
    guards       each protected path and every path under it, in any case (the servers' /metrics, /admin,
                 health routes and the spec's health-check paths): 404 in the API's JSON error, whatever the
                 table
    refused      a `refuse` entry: 404 in the API's JSON error (gateway/envoy/local_replies.py)
    pinned       a `baseline` entry: the baseline's endpoints through its own cluster (`<baseline>-models`),
                 which the analysis never reads
    split        per header rule, then the default: each `split` entry, as routes.py routes a split
    unknown      `unknown_paths: baseline`: every other path to that same cluster; `refuse`: no route, so
                 Envoy's 404 (flag NR) in the API's JSON error
The listener normalises paths first (gateway/envoy/resources.py), so `//metrics` or `/v1/../metrics` are
the guards' too.

Every route's name says where it came from, its API kind and the checks its traffic feeds
(`names.api_route`): the access log carries it to the answers (gateway/answers/entries.py).
"""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from google.protobuf import wrappers_pb2

from gateway import names
from gateway.envoy.common import duration
from gateway.spec.apis import Entry, path_regex
from gateway.spec.model import RolloutSpec

_PINNED_RETRY_ON = "connect-failure,reset"
_GUARDED = "the model servers' own routes (metrics, admin, health) are not served through the gateway"


def baseline_variant(spec: RolloutSpec) -> str:
    """The variant that answers pinned APIs and unknown paths: `retries.fallback`, else the variant named
    `baseline`, else the first; being the variant that serves when all else fails."""
    if spec.retries.fallback is not None:
        return spec.retries.fallback
    return "baseline" if "baseline" in spec.variants else next(iter(spec.variants))


def _method(method: str) -> route_components_pb2.HeaderMatcher:
    return route_components_pb2.HeaderMatcher(
        name=":method", string_match=string_pb2.StringMatcher(exact=method)
    )


def entry_match(
    entry: Entry, *headers: route_components_pb2.HeaderMatcher
) -> route_components_pb2.RouteMatch:
    """The entry's method and path (the query string aside; a `{name}` segment by regex), and `headers`."""
    matchers = [_method(entry.method), *headers]
    if entry.templated:
        return route_components_pb2.RouteMatch(
            safe_regex=regex_pb2.RegexMatcher(regex=path_regex(entry.path)), headers=matchers
        )
    return route_components_pb2.RouteMatch(path=entry.path, headers=matchers)


def route_name(where: str, entry: Entry) -> str:
    return names.api_route(f"{where} {entry.key}", entry.kind, entry.checks)


def _refusal(name: str, match: route_components_pb2.RouteMatch, message: str) -> route_components_pb2.Route:
    """A 404 Envoy answers itself: the local replies put `message` into the API's error JSON."""
    return route_components_pb2.Route(
        name=name,
        match=match,
        direct_response=route_components_pb2.DirectResponseAction(
            status=404, body=base_pb2.DataSource(inline_string=message)
        ),
    )


def guard_routes(spec: RolloutSpec) -> list[route_components_pb2.Route]:
    return [
        _refusal(
            f"protected {path}",
            route_components_pb2.RouteMatch(
                path_separated_prefix=path.rstrip("/") or "/",
                case_sensitive=wrappers_pb2.BoolValue(value=False),
            ),
            _GUARDED,
        )
        for path in spec.protected_paths()
    ]


def _to_baseline(
    spec: RolloutSpec, name: str, match: route_components_pb2.RouteMatch
) -> route_components_pb2.Route:
    """To the baseline's own cluster, out of every count the rollout reads; a refused connection tries
    another pod."""
    return route_components_pb2.Route(
        name=name,
        match=match,
        route=route_components_pb2.RouteAction(
            cluster=names.models_cluster(baseline_variant(spec)),
            timeout=duration(spec.timeouts.request),
            retry_policy=route_components_pb2.RetryPolicy(
                retry_on=_PINNED_RETRY_ON, num_retries=wrappers_pb2.UInt32Value(value=spec.retries.attempts)
            ),
        ),
    )


def fixed_routes(spec: RolloutSpec) -> list[route_components_pb2.Route]:
    """The guards, then the table's refused and pinned entries, in the table's order."""
    routes = guard_routes(spec)
    for entry in spec.apis.table():
        if entry.treatment == "refuse":
            message = f"{entry.key} is not served by this gateway (its spec's apis.routes refuses it)"
            routes.append(_refusal(route_name("refused", entry), entry_match(entry), message))
        elif entry.treatment == "baseline":
            routes.append(_to_baseline(spec, route_name("pinned", entry), entry_match(entry)))
    return routes


def split_entries(spec: RolloutSpec) -> tuple[Entry, ...]:
    return tuple(entry for entry in spec.apis.table() if entry.treatment == "split")


def unknown_routes(spec: RolloutSpec) -> list[route_components_pb2.Route]:
    """`unknown_paths: baseline`: every other request to the baseline; `refuse`: none (Envoy's 404)."""
    if spec.apis.unknown_paths == "refuse":
        return []
    name = names.api_route("unknown paths", "other", ())
    return [_to_baseline(spec, name, route_components_pb2.RouteMatch(prefix="/"))]
