"""The real gateway and the real Envoy in front of third-party servers that already run.

A GatewayStack whose upstreams are not stand-ins: each variant is one ThirdPartyServer, named as the
variant (`llama-cpp`, `transformers`, `vllm`), health-checked on its own `/health`. The servers outlive
the stack (session fixtures), so one stack per test module costs only Envoy's and the gateway's start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import httpx

from graystack.local.gateway_stack import GatewayStack, Running, measuring_args
from tests.support.third_party.servers import ThirdPartyServer, chat_body, identity_of

HEADER = "X-Client-Type"


def upstream_spec(servers: dict[str, ThirdPartyServer]) -> dict:
    """A rule per server (`X-Client-Type: <variant>` sends there); all other traffic to the first. No
    latency comparison: the servers are different engines, one of them several times slower to answer,
    which the gateway's measurement of every answer (rightly) sees; these stacks are about routing."""
    names = list(servers)
    return {
        "name": "third-party",
        "variants": {name: {"endpoints": [server.endpoint]} for name, server in servers.items()},
        "routing": {
            "header": HEADER,
            "rules": [{"value": name, "variant": name} for name in names],
            "weights": {name: 100 if name == names[0] else 0 for name in names},
        },
        "timeouts": {"request": "60s", "first_byte": "10s"},
        "retries": {"on": "5xx,reset,connect-failure", "attempts": 1, "fallback": names[0]},
        "health_check": {"path": "/health", "interval": "1s"},
        "analysis": {"max_latency_ratio": None},
    }


class RunningServers(Running):
    """The upstreams, already running: nothing to start or stop. The gateway always reads Envoy's admin
    (`--envoy-admin`): each variant's requests and errors as Envoy saw them."""

    def __init__(self, spec: dict, gateway_args: Sequence[str]) -> None:
        super().__init__(spec)
        self.extra_gateway_args = list(gateway_args)

    def gateway_args(self, envoy_admin: str) -> list[str]:
        return [*measuring_args(envoy_admin, []), *self.extra_gateway_args]


class ThirdPartyStack(GatewayStack):
    def __init__(
        self,
        workdir: Path,
        envoy: str,
        servers: dict[str, ThirdPartyServer],
        spec_changes: dict | None = None,
        gateway_args: Sequence[str] = (),
    ) -> None:
        """`servers`: variant name -> its running server; the first takes the default traffic.
        `spec_changes`: top-level spec fields over upstream_spec's (a strategy, an analysis);
        `gateway_args`: more `graystack gateway` flags (`--metrics-target URL`, ...)."""
        identities = [server.identity for server in servers.values()]
        if len(set(identities)) != len(identities):
            raise ValueError(f"two servers answer alike, their answers cannot tell them apart: {identities}")
        running = RunningServers(upstream_spec(servers) | (spec_changes or {}), gateway_args)
        super().__init__(workdir, envoy, upstreams=running)
        self.servers = servers

    @property
    def url(self) -> str:
        """Envoy's listener: where clients (and SDKs, as `base_url`) send requests."""
        return f"http://127.0.0.1:{self.ports['listen']}"

    def request(self, headers: dict | None = None) -> httpx.Response:
        return self.client.post("/v1/chat/completions", json=chat_body(), headers=headers)

    def server_of(self, response: httpx.Response) -> str:
        """Which server made this (non-streamed) answer, by what the answer says (these servers send
        no `x-graystack-variant`: graystack's own servers do)."""
        if response.status_code != 200:
            raise AssertionError(f"request failed ({response.status_code}): {response.text}")
        identity = identity_of(response.json())
        names = [name for name, server in self.servers.items() if server.identity == identity]
        if len(names) != 1:
            raise AssertionError(f"no one server answers as {identity}: {self.servers}")
        return names[0]

    def served_by(self, n: int, headers: dict | None = None) -> Counter[str]:
        """How many of `n` requests each server answered."""
        return Counter(self.server_of(self.request(headers)) for _ in range(n))

    def set_weights(self, weights: dict[str, int]) -> None:
        """A flip with the CLI (`graystack weight NAME=PCT ...`), then until every proxy has ACKed it."""
        generation = self.status()["generation"]
        self.cli("weight", *(f"{name}={pct}" for name, pct in weights.items()))
        self.wait_converged(generation_above=generation)
