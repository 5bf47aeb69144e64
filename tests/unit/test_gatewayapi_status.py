"""The control plane's proof of a route change (gateway/gatewayapi/status.py): every parent reports the
route Accepted with its references resolved, at the generation written or later; a lagging gateway, one
that never reports, a refusal and a second parent that has not looked yet each say what stands."""

from __future__ import annotations

import copy

from gateway.gatewayapi.status import not_accepted


def condition(kind: str, generation: int, status: str = "True", reason: str = "Accepted") -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": "",
        "observedGeneration": generation,
        "lastTransitionTime": "2026-12-06T00:00:00Z",
    }


def route(generation: int, *parents: dict) -> dict:
    return {
        "metadata": {"name": "llm", "namespace": "serving", "generation": generation},
        "spec": {"parentRefs": [{"name": "shared", "namespace": "infra"}, {"name": "internal"}]},
        "status": {"parents": list(parents)},
    }


def reported(name: str, generation: int, namespace: str | None = None, **changes: str) -> dict:
    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}
    if namespace:
        ref["namespace"] = namespace
    accepted = condition(
        "Accepted", generation, changes.get("accepted", "True"), changes.get("reason", "Accepted")
    )
    return {
        "parentRef": ref,
        "controllerName": "example.com/gateway",
        "conditions": [accepted, condition("ResolvedRefs", generation, reason="ResolvedRefs")],
    }


def test_every_parent_at_the_written_generation_is_accepted():
    assert not_accepted(route(4, reported("shared", 4, "infra"), reported("internal", 5)), 4) == []


def test_a_gateway_that_has_not_caught_up_or_not_looked_is_named():
    lagging = route(4, reported("shared", 3, "infra"))
    assert not_accepted(lagging, 4) == [
        "Gateway infra/shared: Accepted is of generation 3, the write was 4",
        "Gateway infra/shared: ResolvedRefs is of generation 3, the write was 4",
        "Gateway serving/internal has not reported on the route",
    ]


def test_a_refusal_says_the_gateways_reason():
    refused = route(4, reported("shared", 4, "infra", accepted="False", reason="NotAllowedByListeners"),
                    reported("internal", 4))  # fmt: skip
    assert not_accepted(refused, 4) == ["Gateway infra/shared: Accepted is False (NotAllowedByListeners)"]


def test_a_route_with_no_parent_or_no_status_proves_nothing():
    bare = route(1)
    bare["spec"]["parentRefs"] = []
    assert not_accepted(bare, 1) == ["the route names no parent Gateway"]
    quiet = copy.deepcopy(route(1))
    del quiet["status"]
    assert len(not_accepted(quiet, 1)) == 2
