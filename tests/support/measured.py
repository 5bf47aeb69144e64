"""A gateway that measures answers, on loopback: the real gateway process code in this test's event loop
(so a test reads its answer store), the real Envoy it programs, and upstreams the test names.

The client side measures as a user would: the time from sending the request to the first event that
carries generated content (a streamed answer) or to the whole body (one that is not streamed).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from gateway.answers.answer import Answer
from gateway.app import GatewayOptions, GatewayProcess
from gateway.envoy.bootstrap import BootstrapOptions, bootstrap_yaml
from gateway.envoy.resources import ListenerAddress
from gateway.local import local_gateway
from graystack.local.gateway_stack import envoy_argv
from graystack.local.processes import ManagedProcess, free_port, start_process

ROUTED_HEADER = "X-Client-Type"


@dataclass
class Measured:
    gateway: GatewayProcess
    envoy: ManagedProcess
    url: str
    envoy_admin: str

    async def answers(self, cursor: int, n: int, within: float = 10.0) -> list[Answer]:
        """The next `n` answers after `cursor` (Envoy flushes its access log every second)."""
        deadline = time.monotonic() + within
        while True:
            batch = self.gateway.answers.since(cursor)
            if len(batch.answers) >= n or time.monotonic() > deadline:
                assert len(batch.answers) >= n, f"{len(batch.answers)} of {n} answers arrived: {batch}"
                return list(batch.answers)
            await asyncio.sleep(0.05)


def spec(variants: Mapping[str, int], rules: Mapping[str, str]) -> dict:
    """`variants`: name -> port; the first takes the default split, each rule's header value goes to its
    variant. No retries, so each answer is the variant's own."""
    first = next(iter(variants))
    return {
        "name": "answers",
        "variants": {name: {"endpoints": [f"127.0.0.1:{port}"]} for name, port in variants.items()},
        "routing": {
            "header": ROUTED_HEADER,
            "rules": [{"value": value, "variant": variant} for value, variant in rules.items()],
            "weights": {name: 100 if name == first else 0 for name in variants},
        },
        "timeouts": {"request": "30s"},
        "retries": {"on": "5xx", "attempts": 0},
        "health_check": None,  # every server counts as healthy: the tests measure answers, not health
    }


@asynccontextmanager
async def measured_gateway(
    tmp_path: Path,
    envoy_binary: str,
    variants: Mapping[str, int],
    rules: Mapping[str, str],
    spec_changes: Mapping | None = None,
) -> AsyncIterator[Measured]:
    """`spec_changes`: top-level spec fields over `spec(variants, rules)` (a strategy, its analysis);
    the gateway reads Envoy's admin (the `direct` provider), so a rollout's guard is on."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump({**spec(variants, rules), **(spec_changes or {})}))
    listen, admin = free_port(), free_port()
    options = GatewayOptions(
        spec=spec_path,
        xds_port=free_port(),
        admin_port=free_port(),
        envoy_admin=f"http://127.0.0.1:{admin}",
    )
    gateway = local_gateway(options)
    await gateway.start()
    bootstrap = tmp_path / "envoy.yaml"
    bootstrap.write_text(
        bootstrap_yaml(
            BootstrapOptions(
                xds_port=gateway.options.xds_port,
                listen=ListenerAddress("127.0.0.1", listen),
                admin_port=admin,
            )
        )
    )
    envoy = start_process("envoy", envoy_argv(envoy_binary, bootstrap, 1), tmp_path / "logs")
    try:
        url = f"http://127.0.0.1:{listen}"
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient(timeout=2) as client:
            while True:
                assert envoy.alive(), f"Envoy exited:\n{envoy.log_tail()}"
                try:
                    if (await client.get(f"http://127.0.0.1:{admin}/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"Envoy not ready:\n{envoy.log_tail()}"
                await asyncio.sleep(0.1)
        yield Measured(gateway, envoy, url, f"http://127.0.0.1:{admin}")
    finally:
        envoy.stop()
        await gateway.stop()


def has_content(event: dict) -> bool:
    """The client's own reading of an event: does it carry generated content?"""
    if event.get("type") in ("content_block_delta", "response.output_text.delta"):
        return True
    return any(
        (choice.get("delta") or {}).get("content") or (choice.get("delta") or {}).get("tool_calls")
        for choice in event.get("choices") or []
    )


async def client_ttft(
    client: httpx.AsyncClient, path: str, headers: dict, body: dict, stop_after_first: bool = False
) -> tuple[int, float | None]:
    """(status, seconds to the first content event or, unstreamed, to the whole body) as the client saw it."""
    started = time.perf_counter()
    async with client.stream("POST", path, headers=headers, json=body) as response:
        if "text/event-stream" not in response.headers.get("content-type", ""):
            await response.aread()
            return response.status_code, time.perf_counter() - started
        first = None
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:") or first is not None:
                    continue
                try:
                    event = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(event, dict) and has_content(event):
                    first = time.perf_counter() - started
                    if stop_after_first:
                        break
        except httpx.RemoteProtocolError:
            pass  # a stream the upstream cut: what the client saw until then stands
        return response.status_code, first
