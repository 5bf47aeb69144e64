"""graystack's side of a user's Gateway API world (tests/support/gateway_api_stand.py), without the rest of
the gateway: its access-log receiver on the stand's `als_port`, and the data plane edge
(gateway/kubernetes/gateway_api.py) that writes the split and proves it, looked at as the controller
would. Each look's gate is kept with when it was taken, so tests and benchmarks read how long each proof
took."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc

from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from gateway.kubernetes.api import api_client
from gateway.kubernetes.gateway_api import GatewayApiDataPlane
from gateway.rollout.rollout_state import SplitGate
from gateway.spec.model import RolloutSpec, validate_spec
from tests.support.gateway_api_stand import HEADER, Stand


def spec(
    gateway_api: dict[str, Any],
    weights: dict[str, int],
    segment: dict[str, int] | None = None,
    variants: tuple[str, str] = ("stable", "canary"),
) -> RolloutSpec:
    """A rollout of `variants` (baseline first) on the user's route; `segment`: the `beta` rule's split."""
    rules = [{"value": "beta", "weights": segment}] if segment else []
    return validate_spec(
        {
            "name": "llm",
            "variants": {v: {"service": f"llm-v{i + 1}", "port": 8000} for i, v in enumerate(variants)},
            "routing": {"header": HEADER, "weights": weights, "rules": rules},
            "retries": {"fallback": variants[0]},
            "gateway_api": gateway_api,
        }
    )


class Graystack:
    """`async with Graystack(stand, live, kubeconfig)`: the receiver serving; `look()` as the controller."""

    def __init__(self, stand: Stand, live: RolloutSpec, kubeconfig: str) -> None:
        self.stand = stand
        self.live = live
        self.store = AnswerStore()
        self.plane = GatewayApiDataPlane(api_client(kubeconfig), self.store, lambda: self.live)
        self.looks: list[tuple[float, SplitGate]] = []  # (monotonic, gate)
        self._server: grpc.aio.Server | None = None

    async def __aenter__(self) -> Graystack:
        self._server = grpc.aio.server()
        AnswerReceiver(self.store, placement=self.plane).register(self._server)
        self._server.add_insecure_port(f"127.0.0.1:{self.stand.als_port}")
        await self._server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)

    async def look(self) -> SplitGate:
        gate = await self.plane.look(self.live, time.time())
        self.looks.append((time.monotonic(), gate))
        return gate

    async def until(
        self, done: Callable[[SplitGate], bool], seconds: float, every: float = 0.25
    ) -> SplitGate:
        """Looks until `done(gate)`; AssertionError with the last gate past `seconds`."""
        deadline = time.monotonic() + seconds
        gate = await self.look()
        while not done(gate):
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {seconds}s; the last gate: {gate}")
            await asyncio.sleep(every)
            gate = await self.look()
        return gate

    def generation(self, route: str) -> int:
        found = self.stand.api.get("HTTPRoute", self.stand.namespace, route)
        assert found is not None
        return int(found["metadata"]["generation"])
