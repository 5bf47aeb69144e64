"""What a backendRef names, for the test-only reference gateway (tests/support/reference_gateway.py): the
addresses behind a Service (its EndpointSlices) or an InferencePool (the pods it selects), or why there
are none. Pure: the objects one look at the API read, in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POOL_GROUP = "inference.networking.k8s.io"
SERVICE_LABEL = "kubernetes.io/service-name"  # an EndpointSlice's Service

Key = tuple[str, str]  # an object's (namespace, name)
Endpoints = list[tuple[str, int]]  # (IP, port), sorted


@dataclass(frozen=True)
class Objects:
    """What one look at the API read, in the namespaces the gateway watches."""

    routes: Sequence[dict[str, Any]] = ()
    services: Sequence[dict[str, Any]] = ()
    slices: Sequence[dict[str, Any]] = ()  # EndpointSlices (discovery.k8s.io/v1)
    pools: Sequence[dict[str, Any]] = ()  # InferencePools (inference.networking.k8s.io/v1)
    pods: Sequence[dict[str, Any]] = ()


@dataclass(frozen=True)
class Unresolved:
    """A backendRef that leads nowhere: the ResolvedRefs condition's reason and message."""

    reason: str
    message: str


def key(obj: Mapping[str, Any]) -> Key:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def is_pool(ref: Mapping[str, Any]) -> bool:
    return (ref.get("group"), ref.get("kind")) == (POOL_GROUP, "InferencePool")


def resolve(ref: Mapping[str, Any], namespace: str, objects: Objects) -> Endpoints | Unresolved:
    """The addresses a backendRef (of a route in `namespace`) names: a Service's ready EndpointSlice
    addresses at the port its `port` maps to, or the Running pods an InferencePool selects at each of
    its targetPorts. Another namespace is refused: no ReferenceGrant is read here."""
    kind, name = ref.get("kind", "Service"), ref["name"]
    if ref.get("namespace", namespace) != namespace:
        return Unresolved(
            "RefNotPermitted", f"{kind} {ref['namespace']}/{name}: no ReferenceGrant is read here"
        )
    if (ref.get("group", ""), kind) == ("", "Service"):
        return _service(namespace, name, ref.get("port"), objects)
    if is_pool(ref):
        return _pool(namespace, name, objects)
    return Unresolved("InvalidKind", f"{ref.get('group')}/{kind} is neither a Service nor an InferencePool")


def _named(objects: Sequence[dict[str, Any]], namespace: str, name: str) -> dict[str, Any] | None:
    return next((obj for obj in objects if key(obj) == (namespace, name)), None)


def _service(namespace: str, name: str, port: int | None, objects: Objects) -> Endpoints | Unresolved:
    """The Service's port, by its name, picks each slice's port number (a Service port's targetPort may
    differ from pod to pod, which is why slices carry the numbers)."""
    service = _named(objects.services, namespace, name)
    if service is None:
        return Unresolved("BackendNotFound", f"Service {namespace}/{name} not found")
    ports = [p for p in service["spec"].get("ports", []) if p["port"] == port]
    if not ports:
        return Unresolved("BackendNotFound", f"Service {namespace}/{name} has no port {port}")
    port_name = ports[0].get("name", "")
    found: set[tuple[str, int]] = set()
    for piece in objects.slices:
        labels = piece["metadata"].get("labels") or {}
        if piece["metadata"]["namespace"] != namespace or labels.get(SERVICE_LABEL) != name:
            continue
        numbers = [p["port"] for p in piece.get("ports") or [] if p.get("name", "") == port_name]
        for endpoint in piece.get("endpoints", []) if numbers else ():
            if (endpoint.get("conditions") or {}).get("ready") is not False:  # unset means ready
                found.update((address, numbers[0]) for address in endpoint["addresses"])
    return sorted(found)


def _pool(namespace: str, name: str, objects: Objects) -> Endpoints | Unresolved:
    pool = _named(objects.pools, namespace, name)
    if pool is None:
        return Unresolved("BackendNotFound", f"InferencePool {namespace}/{name} not found")
    wanted = pool["spec"]["selector"].get("matchLabels", {})
    numbers = [port["number"] for port in pool["spec"]["targetPorts"]]
    found = []
    for pod in objects.pods:
        labels = pod["metadata"].get("labels") or {}
        status = pod.get("status", {})
        selected = pod["metadata"]["namespace"] == namespace and all(
            labels.get(k) == v for k, v in wanted.items()
        )
        if selected and status.get("phase") == "Running" and status.get("podIP"):
            found += [(status["podIP"], number) for number in numbers]
    return sorted(found)
