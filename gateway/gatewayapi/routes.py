"""An HTTPRoute with the rollout's split written into it. Pure: the route as read, in; the route to write
(with the resourceVersion it was read at), out.

Only what graystack owns changes:
- the `weight` of each backendRef that stands for a variant (`gateway_api.backends`), in every rule that
  has one: the variant's weight in the default split;
- rules for header segments (`routing.rules`), named `graystack-<segment>-<digest>`: each a copy of the
  base rule (the first rule that references every variant), its matches, filters and timeouts, with the
  segment's header added to every match and the segment's own weights. A match with one more header is
  more specific, so Gateway API's precedence gives the segment's requests to it wherever they would have
  matched the base rule. They come last, and are known again by their names after a restart; a segment
  the spec no longer has loses its rule, and `released` removes them all;
- the shadow stage's copy (`routing.mirror`): Gateway API's standard `RequestMirror` filter with a
  `percent`, to the mirrored variant's backendRef, in every rule that carries the split. It is known as
  graystack's by that backendRef, and removed when the shadow stage ends.
Everything else (another's rules and backendRefs, filters, annotations, labels, the rules' order) is
left as it was read.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from gateway.spec.gateway_api import BackendRef, GatewayApi
from gateway.spec.model import RolloutSpec

OWNED = "graystack-"  # the name prefix of the rules graystack adds
MAX_RULES = 16  # Gateway API's HTTPRoute.spec.rules maxItems
MAX_MATCHES = 128  # its CEL rule on the matches of all rules together
MAX_HEADERS = 16  # HTTPRouteMatch.headers maxItems

Route = dict[str, Any]


class RouteError(ValueError):
    """The route cannot carry the split as the spec asks; the message names the route and what is wrong."""


def route_name(route: Mapping[str, Any]) -> str:
    metadata = route.get("metadata", {})
    return f"HTTPRoute {metadata.get('namespace', 'default')}/{metadata.get('name', '?')}"


def owned(rule: Mapping[str, Any]) -> bool:
    return str(rule.get("name", "")).startswith(OWNED)


def rule_name(segment: str) -> str:
    """A rule name for a segment: a DNS-1123 subdomain, unique per value (its digest), recognisable."""
    slug = re.sub(r"[^a-z0-9]+", "-", segment.lower()).strip("-")[:40].strip("-") or "segment"
    return f"{OWNED}{slug}-{hashlib.sha256(segment.encode()).hexdigest()[:8]}"


def variant_of(ref: Mapping[str, Any], backends: Mapping[str, BackendRef], namespace: str) -> str | None:
    """The variant `ref` stands for (None: a backendRef that is not the rollout's)."""
    found = (
        ref.get("group", ""),
        ref.get("kind", "Service"),
        ref.get("name"),
        ref.get("namespace", namespace),
        ref.get("port"),
    )
    for variant, backend in backends.items():
        if found == (backend.group, backend.kind, backend.name, backend.namespace or namespace, backend.port):
            return variant
    return None


def written(route: Mapping[str, Any], spec: RolloutSpec) -> Route:
    """`route` carrying `spec`'s split (its default weights and its header segments)."""
    api = _api(spec)
    namespace = route.get("metadata", {}).get("namespace", "default")
    out: Route = copy.deepcopy(dict(route))
    theirs = [rule for rule in out.get("spec", {}).get("rules", []) if not owned(rule)]
    for rule in theirs:
        ours = False
        for ref in rule.get("backendRefs", []):
            variant = variant_of(ref, api.backends, namespace)
            if variant is not None:
                ref["weight"] = spec.routing.weights.get(variant, 0)
                ours = True
        if ours:
            _mirror(rule, spec, api, namespace)
    base = _base(theirs, api, namespace, route)
    segments = [
        _segment_rule(base, rule.value, rule.split(), spec, api, namespace) for rule in spec.routing.rules
    ]
    out["spec"]["rules"] = [*theirs, *segments]
    _check_limits(out)
    return out


def released(route: Mapping[str, Any]) -> Route:
    """`route` without the rules graystack added (the rollout ended), weights as they stand."""
    out: Route = copy.deepcopy(dict(route))
    out["spec"]["rules"] = [rule for rule in out.get("spec", {}).get("rules", []) if not owned(rule)]
    return out


def drift(route: Mapping[str, Any], spec: RolloutSpec) -> list[str]:
    """What of graystack's own in `route` differs from what `spec` asks (someone else changed it)."""
    wanted = written(route, spec)
    api = _api(spec)
    namespace = route.get("metadata", {}).get("namespace", "default")
    found = []
    theirs = [r for r in wanted["spec"]["rules"] if not owned(r)]
    for index, rule in enumerate(r for r in route.get("spec", {}).get("rules", []) if not owned(r)):
        if index < len(theirs) and theirs[index].get("filters") != rule.get("filters"):
            found.append(f"rule {rule.get('name', index)}: the shadow copy's RequestMirror filter changed")
        for ref in rule.get("backendRefs", []):
            variant = variant_of(ref, api.backends, namespace)
            if variant is not None and ref.get("weight", 1) != spec.routing.weights.get(variant, 0):
                found.append(
                    f"rule {rule.get('name', index)}: {variant}'s weight is {ref.get('weight', 1)}, "
                    f"the rollout's {spec.routing.weights.get(variant, 0)}"
                )
    ours = {rule["name"]: rule for rule in route.get("spec", {}).get("rules", []) if owned(rule)}
    for rule in (r for r in wanted["spec"]["rules"] if owned(r)):
        if ours.pop(rule["name"], None) != rule:
            found.append(f"rule {rule['name']}: missing or changed")
    found += [f"rule {name}: not the rollout's any more" for name in ours]
    return found


def _api(spec: RolloutSpec) -> GatewayApi:
    if spec.gateway_api is None:
        raise RouteError("the spec names no gateway_api routes")
    return spec.gateway_api


def _base(rules: list[Route], api: GatewayApi, namespace: str, route: Mapping[str, Any]) -> Route:
    """The first rule that references every variant's backendRef; RouteError naming those not found."""
    for rule in rules:
        found = {variant_of(ref, api.backends, namespace) for ref in rule.get("backendRefs", [])}
        if set(api.backends) <= found:
            return rule
    everywhere = {
        variant_of(ref, api.backends, namespace) for rule in rules for ref in rule.get("backendRefs", [])
    }
    missing = [f"{v} ({b.describe(namespace)})" for v, b in api.backends.items() if v not in everywhere]
    if missing:
        raise RouteError(f"{route_name(route)} has no backendRef for {', '.join(missing)}")
    raise RouteError(
        f"{route_name(route)}: no one rule references every variant's backendRef, so no split can be set"
    )


def _segment_rule(
    base: Route, value: str, split: Mapping[str, int], spec: RolloutSpec, api: GatewayApi, namespace: str
) -> Route:
    header = {"type": "Exact", "name": spec.routing.header, "value": value}
    matches = copy.deepcopy(base.get("matches") or [{"path": {"type": "PathPrefix", "value": "/"}}])
    for match in matches:
        match["headers"] = [*match.get("headers", []), header]
        if len(match["headers"]) > MAX_HEADERS:
            raise RouteError(
                f"rule for {spec.routing.header}: {value!r}: more than {MAX_HEADERS} header matches"
            )
    refs = []
    for ref in base.get("backendRefs", []):
        variant = variant_of(ref, api.backends, namespace)
        if variant is not None:
            refs.append({**copy.deepcopy(ref), "weight": split.get(variant, 0)})
    rule: Route = {"name": rule_name(value), "matches": matches, "backendRefs": refs}
    for kept in ("filters", "timeouts"):
        if kept in base:
            rule[kept] = copy.deepcopy(base[kept])
    _mirror(rule, spec, api, namespace)
    return rule


def _mirror(rule: Route, spec: RolloutSpec, api: GatewayApi, namespace: str) -> None:
    """`rule` with graystack's RequestMirror filter as `routing.mirror` asks (none: removed)."""
    filters = [
        f
        for f in rule.get("filters", [])
        if not (
            f.get("type") == "RequestMirror"
            and variant_of(f.get("requestMirror", {}).get("backendRef", {}), api.backends, namespace)
        )
    ]
    mirror = spec.routing.mirror
    if mirror is not None:
        backend = api.backends[mirror.variant]
        ref: Route = {"group": backend.group, "kind": backend.kind, "name": backend.name}
        ref.update(
            {k: v for k, v in (("namespace", backend.namespace), ("port", backend.port)) if v is not None}
        )
        filters.append(
            {"type": "RequestMirror", "requestMirror": {"backendRef": ref, "percent": mirror.percent}}
        )
    if filters:
        rule["filters"] = filters
    else:
        rule.pop("filters", None)


def _check_limits(route: Route) -> None:
    rules = route["spec"]["rules"]
    if len(rules) > MAX_RULES:
        raise RouteError(
            f"{route_name(route)}: {len(rules)} rules with the segments' own, above Gateway API's {MAX_RULES}"
        )
    matches = sum(len(rule.get("matches") or [{}]) for rule in rules)
    if matches > MAX_MATCHES:
        raise RouteError(f"{route_name(route)}: {matches} matches in all, above Gateway API's {MAX_MATCHES}")
