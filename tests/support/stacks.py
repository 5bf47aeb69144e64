"""Running a local stack in a test: started, yielded, stopped, and every process checked gone by PID; and
what tests do to a running stack and ask of it (its stand-ins' modes, Envoy's counters and routes)."""

from __future__ import annotations

from collections.abc import Iterator
from copy import deepcopy
from functools import partial
from typing import Any, TypeVar

import yaml

from gateway.names import ROUTE_CONFIG
from graystack.admin_client import AdminClient
from graystack.local import loopback
from graystack.local.gateway_stack import VARIANTS, GatewayStack
from graystack.local.processes import wait_until

Stack = TypeVar("Stack", bound=GatewayStack)


def running(stack: Stack) -> Iterator[Stack]:
    """For fixtures: `yield from running(RolloutStack(...))` (or `for started in running(...):` with
    more set-up before its `yield started`)."""
    try:
        yield stack.start()
    finally:
        stack.stop()
        for process in stack.processes():
            assert process is None or not process.alive(), f"{process.name} (pid {process.pid}) left running"


def variant_counts(stack: GatewayStack, n: int, headers: dict | None = None) -> dict[str, int]:
    """Which variant answered each of `n` requests through Envoy (any failure fails the test)."""
    counts = dict.fromkeys(VARIANTS, 0)
    for _ in range(n):
        response = stack.request(headers)
        if response.status_code != 200:
            raise AssertionError(f"request failed ({response.status_code}): {response.text}")
        counts[response.headers["x-graystack-variant"]] += 1
    return counts


def set_upstream(
    stack: GatewayStack, variant: str, mode: str, stall_seconds: float = 5.0, anonymous: bool = False
) -> None:
    """`variant`'s stand-in answers in `mode` from now; `anonymous`: its answers carry no
    `x-graystack-variant`, as a server not graystack's."""
    body = {"mode": mode, "stall_seconds": stall_seconds, "reset": True, "anonymous": anonymous}
    loopback.post(
        f"http://127.0.0.1:{stack.ports[variant]}/_control", json=body, timeout=5
    ).raise_for_status()


def upstream_answers(stack: GatewayStack, variant: str) -> dict[str, int]:
    """What `variant`'s stand-in answered, by kind."""
    return loopback.get(f"http://127.0.0.1:{stack.ports[variant]}/_stats", timeout=5).json()


def envoy_stats(stack: GatewayStack) -> dict[str, int]:
    """Envoy's counters and gauges by name."""
    text = loopback.get(f"http://127.0.0.1:{stack.ports['envoy_admin']}/stats", timeout=5).text
    stats = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if value.strip().lstrip("-").isdigit():
            stats[name] = int(value)
    return stats


def envoy_route_version(stack: GatewayStack) -> str:
    """The version of the main route config Envoy holds (not a fault hop's)."""
    dump = loopback.get(
        f"http://127.0.0.1:{stack.ports['envoy_admin']}/config_dump",
        params={"resource": "dynamic_route_configs"},
        timeout=5,
    ).json()
    (main,) = [c for c in dump["configs"] if c["route_config"]["name"] == ROUTE_CONFIG]
    return main["version_info"]


def write_raw_spec(stack: GatewayStack, text: str) -> None:
    """`text` as the stack's spec file, whatever it says (the stack's own copy of the spec stays)."""
    tmp = stack.spec_path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(stack.spec_path)


def gateway_metric(stack: GatewayStack, name: str, labels: dict) -> float:
    """The sum of the gateway's `name` samples whose labels include `labels` (0 if none)."""
    return stack.metric(f"{stack.admin_url}/metrics", name, labels)


def envoy_hosts_healthy(stack: GatewayStack) -> bool:
    """Whether Envoy holds every host of every cluster healthy: none failing a health check, none ejected
    by outlier detection, none waiting for its first check."""
    clusters = loopback.get(
        f"http://127.0.0.1:{stack.ports['envoy_admin']}/clusters", params={"format": "json"}, timeout=5
    ).json()
    return all(
        host.get("health_status", {}).get("eds_health_status", "HEALTHY") == "HEALTHY"
        and not any(value is True for value in host.get("health_status", {}).values())
        for cluster in clusters.get("cluster_statuses", [])
        for host in cluster.get("host_statuses", [])
    )


# What a test may change on a shared stack and `restoring` puts back: the rollout's state is compared too
# (these stacks run no strategy: it must still be the manual rollout it started as).
ROLLOUT_STATE = ("phase", "step", "weight", "paused", "errors", "history", "rollback_pending", "reason")


def _state(status: dict[str, Any]) -> dict[str, Any]:
    rollout = status["rollout"] or {}
    return {
        "routing": status["routing"],
        "faults": status["faults"],
        "last_error": status["spec"]["last_error"],
        "file": status["spec"]["sha256"],
        "rollout": {key: rollout.get(key) for key in ROLLOUT_STATE},
    }


def _apply(stack: GatewayStack, spec: dict[str, Any]) -> None:
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def restore(stack: GatewayStack, spec: dict[str, Any]) -> None:
    """The stack back on `spec` as it was before a test: no fault, no operator flip, no refused edit, every
    proxy converged on it and every host healthy again."""
    status = stack.status()
    with AdminClient(stack.admin_url) as admin:
        for variant in status["faults"]:
            admin.clear_fault(variant)
    if status["routing"]["flipped"]:
        # A flip holds until the file's own split for its segment changes (gateway/spec/overrides.py): a
        # spec with no rules and another default split than the file's ends every one.
        current = stack.spec["routing"].get("weights", {})
        weights = {"baseline": 0, "zero-layer": 100} if current.get("baseline") == 100 else {"baseline": 100}
        ending = deepcopy(spec)
        ending["routing"] = {**ending["routing"], "rules": [], "weights": weights}
        _apply(stack, ending)
    written = yaml.safe_dump(spec, sort_keys=False)  # as `write_spec` writes it
    if stack.spec_path.read_text() != written or status["spec"]["last_error"] is not None:
        _apply(stack, spec)  # a raw edit's file is replaced too (the watcher reads any new file)
    else:
        stack.wait_converged()
    wait_until(partial(envoy_hosts_healthy, stack), 60, "Envoy to hold every host healthy again")


def restoring(stack: GatewayStack) -> Iterator[GatewayStack]:
    """For per-test fixtures on a shared stack (a module-scoped one): the test gets the stack as it stands
    (which must be clean: no fault, no flip, no refused edit), and after it the stack goes back to that
    spec, that routing and that rollout state (`restore`), checked."""
    spec, before = stack.spec, _state(stack.status())
    assert not before["routing"]["flipped"], before
    assert not before["faults"], before
    assert before["last_error"] is None, before
    yield stack
    restore(stack, spec)
    after = _state(stack.status())
    assert after == before, f"the shared stack was not restored: {after} != {before}"
