"""Which variant served an answer the user's gateway logged, from the endpoint that served it: the data
plane's own word (its access log's upstream host), not the route's, so a gateway that sends a weighted
rule's traffic elsewhere (one pool's endpoints for the whole rule, istio#61594) is seen. Pure.

A variant's addresses are its backend's endpoints: a Service's EndpointSlices (ready addresses), or the
pods an InferencePool selects (its `selector.matchLabels`, in its namespace, each pod's IP). An answer is
placed by its host's address alone (ports differ between a Service's port and its pods' target port,
and a pool's pods listen on each of its targetPorts); an address that two variants share is refused,
since no answer from it could be placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


def address(host: str) -> str:
    """`10.0.0.5:8000` -> `10.0.0.5`; `[fd00::5]:8000` -> `fd00::5`."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def pool_addresses(pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The IPs of the running pods an InferencePool selects (same namespace, every matchLabel)."""
    namespace = pool.get("metadata", {}).get("namespace", "default")
    wanted = pool.get("spec", {}).get("selector", {}).get("matchLabels", {})
    found = []
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        labels = meta.get("labels") or {}
        if meta.get("namespace", "default") != namespace or any(
            labels.get(k) != v for k, v in wanted.items()
        ):
            continue
        if status.get("phase") == "Running" and status.get("podIP"):
            found.append(status["podIP"])
    return sorted(found)


def variants_by_address(endpoints: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """address -> variant, from each variant's endpoint addresses; ValueError naming an address two
    variants share."""
    found: dict[str, str] = {}
    for variant, hosts in endpoints.items():
        for host in hosts:
            where = address(host)
            other = found.setdefault(where, variant)
            if other != variant:
                raise ValueError(
                    f"endpoint {where} serves both {other} and {variant}: no answer from it can be placed"
                )
    return found


def served_by(
    hosts: Iterable[str | None], by_address: Mapping[str, str]
) -> tuple[Counter[str], Counter[str]]:
    """(answers per variant, answers not placed: `no upstream host` or `not a variant's: ADDRESS`)."""
    placed: Counter[str] = Counter()
    unplaced: Counter[str] = Counter()
    for host in hosts:
        if not host:
            unplaced["no upstream host"] += 1
            continue
        variant = by_address.get(address(host))
        if variant is None:
            unplaced[f"not a variant's: {address(host)}"] += 1
        else:
            placed[variant] += 1
    return placed, unplaced
