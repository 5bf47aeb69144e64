"""`graystack gateway` in local mode: the spec from a file (watched), each variant's endpoints as the spec
writes them, the rollout state in a file beside the spec."""

from __future__ import annotations

import functools
from collections.abc import Coroutine
from typing import Any

from gateway.admin.protocol import PickerStatus
from gateway.app import GatewayOptions, GatewayParts, GatewayProcess, serve_until_signalled
from gateway.rollout.controller import Rollouts
from gateway.rollout.state_store import FileStateStore
from gateway.service import Gateway
from gateway.sources.endpoints import static_endpoints
from gateway.sources.spec_file import SpecFileWatcher, read_spec


class FileDriver:
    """The spec file's watcher and the rollout controller's loop, beside the admin API."""

    def __init__(self, options: GatewayOptions, gateway: Gateway, controller: Rollouts) -> None:
        self._watcher = SpecFileWatcher(
            options.spec,
            gateway.load,
            gateway.refuse,
            last_hash=gateway.file.sha256 if gateway.file else None,
            interval=options.poll_interval,
        )
        self._controller = controller
        self.placement = None  # graystack's Envoy names each answer's variant

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return [self._watcher.run(), self._controller.run()]

    def picker_status(self) -> PickerStatus | None:
        """None: the local stack serves no Endpoint Picker."""
        return None

    async def start(self) -> None:
        """Nothing more: the watcher and the controller run in the background."""

    async def stop(self) -> None:
        """Nothing first: the background is cancelled with the admin API."""


def local_parts(options: GatewayOptions) -> GatewayParts:
    return GatewayParts(
        first_spec=lambda: read_spec(options.spec),
        endpoints_for=static_endpoints,
        store=FileStateStore(options.rollout_state_path),
        # beside it, `<spec>.state.<rollout>-<candidate>.json`
        lane_store=lambda lane: FileStateStore(options.rollout_state_path.with_suffix(f".{lane}.json")),
        driver=functools.partial(FileDriver, options),
    )


def local_gateway(options: GatewayOptions) -> GatewayProcess:
    return GatewayProcess(options, local_parts(options))


async def run_gateway(options: GatewayOptions) -> None:
    await serve_until_signalled(local_gateway(options))
