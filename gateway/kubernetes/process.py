"""`graystack kube-gateway`: the gateway process with its sources in the cluster.

The same parts as local mode (gateway/app.py: xDS server, admin API, rollout controller), with:
- the spec from its ConfigMap (watched; a bad edit refused, reported as an Event, the last good kept),
- each `service:` variant's pods from its EndpointSlices (watched; Envoy gets each change),
- the rollout state in a ConfigMap, and leader election on a Lease: every replica serves xDS to the
  Envoys connected to it; only the leader runs the controller's analysis loop and writes the state;
  the others apply the leader's state as it changes, so every Envoy gets the same split.

Operator commands through a replica's admin API act on that replica; in a cluster, flip through the
spec ConfigMap (`graystack weight --configmap`, `helm upgrade`), which every replica applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from gateway.app import GatewayOptions, GatewayProcess, serve_until_signalled
from gateway.envoy.resources import EndpointMap
from gateway.kubernetes import events
from gateway.kubernetes.api import api_client
from gateway.kubernetes.endpoints import SERVICE_LABEL, EndpointSlices
from gateway.kubernetes.leader import LeaderElector
from gateway.kubernetes.reflector import Reflector
from gateway.kubernetes.spec_source import SPEC_KEY, SpecConfigMap, origin, spec_from_configmap
from gateway.kubernetes.state import ClusterState, decode_state, state_text
from gateway.rollout.spec import RolloutSpec, SpecError
from gateway.rollout.state_store import save_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KubernetesOptions:
    namespace: str
    spec_configmap: str
    state_configmap: str
    lease: str
    identity: str
    kubeconfig: str | None = None  # None in a pod: the service account
    context: str | None = None
    spec_key: str = SPEC_KEY
    lease_seconds: float = 15.0
    resync_seconds: float = 300.0
    watch_timeout: int = 60
    state_poll: float = 0.25  # how soon the leader's state file reaches the cluster


def gateway_options(kube: KubernetesOptions, state_file: Path, **listen: Any) -> GatewayOptions:
    """GatewayOptions for Kubernetes mode: the spec's "path" names its ConfigMap (status, messages)."""
    return GatewayOptions(
        spec=Path(origin(kube.namespace, kube.spec_configmap)), state_path=state_file, **listen
    )


class KubernetesGatewayProcess(GatewayProcess):
    def __init__(self, options: GatewayOptions, kube: KubernetesOptions) -> None:
        """Lists the spec, the EndpointSlices and the stored state first: a gateway that cannot read
        them (or whose spec is invalid, with no last good one yet) does not start."""
        self.kube = kube
        self.api = api_client(kube.kubeconfig, kube.context)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._controller_task: asyncio.Task | None = None
        self._stopping: set[asyncio.Task] = set()
        discovery = client.DiscoveryV1Api(self.api)
        self._reflectors = {
            "spec": self._configmap_reflector(kube.spec_configmap, self._on_spec),
            "state": self._configmap_reflector(kube.state_configmap, self._on_state),
            "endpoints": self._reflector(
                "endpointslices",
                functools.partial(
                    discovery.list_namespaced_endpoint_slice, kube.namespace, label_selector=SERVICE_LABEL
                ),
                self._on_slices,
            ),
        }
        self.slices = EndpointSlices()
        self.slices.update(self._reflectors["endpoints"].list_now())
        self.cluster_state = ClusterState(self.api, kube.namespace, kube.state_configmap)
        self._pull_state(options.rollout_state_path, self.cluster_state.read())
        self._pushed: str | None = None
        super().__init__(options)  # reads the spec (_initial_spec) and restores the state just pulled
        self.spec_source = SpecConfigMap(
            self.gateway, kube.spec_configmap, self._report, kube.spec_key, self.gateway.file.sha256
        )
        self.elector = LeaderElector(
            self.api,
            kube.namespace,
            kube.lease,
            kube.identity,
            self._threadsafe(self._on_leadership),
            kube.lease_seconds,
        )

    def _configmap_reflector(self, name: str, handler: Callable[[dict], None]) -> Reflector:
        """One ConfigMap, watched by name (what RBAC's resourceNames can allow for list and watch)."""
        core = client.CoreV1Api(self.api)
        list_call = functools.partial(
            core.list_namespaced_config_map, self.kube.namespace, field_selector=f"metadata.name={name}"
        )
        return self._reflector(f"configmap {name}", list_call, handler)

    def _reflector(self, what: str, list_call: Callable, handler: Callable[[dict], None]) -> Reflector:
        return Reflector(
            what,
            list_call,
            self._threadsafe(handler),
            resync=self.kube.resync_seconds,
            watch_timeout=self.kube.watch_timeout,
        )

    def _threadsafe(self, handler: Callable[[Any], None]) -> Callable[[Any], None]:
        """A callback for the reflector and elector threads that runs `handler` on the event loop."""

        def call(value: Any) -> None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(handler, value)

        return call

    # -- GatewayProcess hooks -----------------------------------------------------------------------

    def _initial_spec(self) -> tuple[RolloutSpec, str]:
        objects = self._reflectors["spec"].list_now()
        obj = objects.get(self.kube.spec_configmap)
        if obj is None:
            raise SpecError(f"{origin(self.kube.namespace, self.kube.spec_configmap)}: not found")
        return spec_from_configmap(obj, self.kube.spec_key)

    def _endpoints_source(self) -> Callable[[RolloutSpec], EndpointMap]:
        return self.slices.endpoints_for

    def _background(self) -> list[Coroutine]:
        return [self._push_state_while_leading()]

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await super().start()
        for reflector in self._reflectors.values():
            reflector.start()
        self.elector.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self.elector.stop)  # releases the Lease: a successor takes over now
        for reflector in self._reflectors.values():
            await asyncio.to_thread(reflector.stop)
        await self._stop_controller()
        await super().stop()

    # -- changes from the cluster (on the event loop) -----------------------------------------------

    def _on_spec(self, objects: dict[str, dict]) -> None:
        self.spec_source.apply(objects)

    def _on_slices(self, objects: dict[str, dict]) -> None:
        if not self.slices.update(objects) or self.gateway.file is None:
            return
        try:  # the same spec, split and overrides, built again with the new endpoints
            self.gateway.set_rollout_split(self.gateway.rollout)
        except SpecError as error:
            log.error("new endpoints could not go live: %s", error)

    def _on_state(self, objects: dict[str, dict]) -> None:
        if self.elector.leading:
            return  # the leader's own write coming back
        if self._pull_state(
            self.options.rollout_state_path, state_text(objects.get(self.kube.state_configmap))
        ):
            self.controller.restore()

    def _on_leadership(self, leading: bool) -> None:
        if leading:
            if self._controller_task is None or self._controller_task.done():  # never two loops
                self._controller_task = asyncio.create_task(self._lead())
        else:
            task = asyncio.create_task(self._stop_controller())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def _lead(self) -> None:
        """Resume from the latest stored state, then drive the rollout until leadership ends."""
        text = await asyncio.to_thread(self.cluster_state.read)
        if self._pull_state(self.options.rollout_state_path, text):
            self.controller.restore()
        self._pushed = text
        log.info("leading: the rollout continues at %s", self.controller.state.label())
        await self.controller.run()

    async def _stop_controller(self) -> None:
        task, self._controller_task = self._controller_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _pull_state(self, path: Path, text: str | None) -> bool:
        """Writes a stored state into the local state file; says whether it differed from the live one."""
        if text is None:
            return False
        try:
            state = decode_state(text)
        except ValueError as error:
            log.warning("stored rollout state refused, keeping ours: %s", error)
            return False
        if getattr(self, "controller", None) is not None and self.controller.state == state:
            return False
        save_state(path, state)
        return True

    async def _push_state_while_leading(self) -> None:
        path = self.options.rollout_state_path
        while True:
            await asyncio.sleep(self.kube.state_poll)
            if not self.elector.leading:
                continue
            try:
                text = path.read_text(encoding="utf-8")
                if text != self._pushed:
                    await asyncio.to_thread(self.cluster_state.write, text)
                    self._pushed = text
            except Exception as error:  # the API server is away: the file keeps it; retried next poll
                log.warning("rollout state not stored in the cluster yet: %s", error)

    def _report(self, obj: dict, reason: str, message: str, kind: str) -> None:
        if self._loop is not None:
            self._loop.run_in_executor(
                None,
                functools.partial(events.report, self.api, obj, reason, message, kind, self.kube.identity),
            )


async def run_kube_gateway(options: GatewayOptions, kube: KubernetesOptions) -> None:
    await serve_until_signalled(KubernetesGatewayProcess(options, kube))
