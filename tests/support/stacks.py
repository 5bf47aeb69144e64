"""Running a local stack in a test: started, yielded, stopped, and every process checked gone by PID; and
what tests do to a running stack and ask of it (its stand-ins' modes, Envoy's counters and routes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import httpx

from gateway.names import ROUTE_CONFIG
from graystack.local.gateway_stack import VARIANTS, GatewayStack

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
    httpx.post(f"http://127.0.0.1:{stack.ports[variant]}/_control", json=body, timeout=5).raise_for_status()


def upstream_answers(stack: GatewayStack, variant: str) -> dict[str, int]:
    """What `variant`'s stand-in answered, by kind."""
    return httpx.get(f"http://127.0.0.1:{stack.ports[variant]}/_stats", timeout=5).json()


def envoy_stats(stack: GatewayStack) -> dict[str, int]:
    """Envoy's counters and gauges by name."""
    text = httpx.get(f"http://127.0.0.1:{stack.ports['envoy_admin']}/stats", timeout=5).text
    stats = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if value.strip().lstrip("-").isdigit():
            stats[name] = int(value)
    return stats


def envoy_route_version(stack: GatewayStack) -> str:
    """The version of the main route config Envoy holds (not a fault hop's)."""
    dump = httpx.get(
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
