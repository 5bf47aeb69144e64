"""The control plane's proof of a route change: every parent Gateway the route names reports the route
`Accepted` and its references resolved (`ResolvedRefs`), each at an `observedGeneration` at least the one
graystack wrote. Pure: the route as read, and the generation its write was given, in; what still stands
in the way, out (nothing: accepted).

A gateway that has not yet seen the write still shows the conditions of the generation before, so a
condition counts only at the written generation or later; a parent with no entry in `status.parents`
has not looked at the route at all. This proves the gateway took the route, not that its data plane
serves the weights (istio#61594 was Accepted): the split the answers show is the other proof
(gateway/rollout/sequential/split.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REQUIRED = ("Accepted", "ResolvedRefs")


def _same_parent(ref: Mapping[str, Any], other: Mapping[str, Any], namespace: str) -> bool:
    def key(r: Mapping[str, Any]) -> tuple[object, ...]:
        return (
            r.get("group", "gateway.networking.k8s.io"),
            r.get("kind", "Gateway"),
            r.get("namespace", namespace),
            r.get("name"),
            r.get("sectionName"),
            r.get("port"),
        )

    return key(ref) == key(other)


def not_accepted(route: Mapping[str, Any], generation: int) -> list[str]:
    """Why `route` at `generation` is not yet proven accepted by every parent (empty: it is)."""
    return [why for why, _ in problems(route, generation)]


def refused(route: Mapping[str, Any], generation: int) -> bool:
    """A parent reports a required condition False at `generation`: the gateway refused the route (as
    opposed to not having looked at it yet)."""
    return any(refusal for _, refusal in problems(route, generation))


def problems(route: Mapping[str, Any], generation: int) -> list[tuple[str, bool]]:
    """(why, a refusal) for each parent's condition that does not yet prove the route accepted."""
    metadata = route.get("metadata", {})
    namespace = metadata.get("namespace", "default")
    parents = route.get("spec", {}).get("parentRefs", [])
    reported = route.get("status", {}).get("parents", [])
    if not parents:
        return [("the route names no parent Gateway", True)]
    found = []
    for parent in parents:
        name = f"Gateway {parent.get('namespace', namespace)}/{parent.get('name')}"
        entries = [entry for entry in reported if _same_parent(entry.get("parentRef", {}), parent, namespace)]
        if not entries:
            found.append((f"{name} has not reported on the route", False))
            continue
        conditions = {c.get("type"): c for entry in entries for c in entry.get("conditions", [])}
        for kind in REQUIRED:
            condition = conditions.get(kind)
            if condition is None:
                found.append((f"{name}: no {kind} condition", False))
            elif condition.get("observedGeneration", 0) < generation:
                seen = condition.get("observedGeneration", 0)
                found.append((f"{name}: {kind} is of generation {seen}, the write was {generation}", False))
            elif condition.get("status") != "True":
                why = f"{condition.get('reason', '?')}: {condition.get('message', '')}".rstrip(": ")
                found.append((f"{name}: {kind} is {condition.get('status')} ({why})", True))
    return found
