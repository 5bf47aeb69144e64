"""`graystack kube-gateway`: the gateway process with its sources in the cluster.

The same parts as local mode (gateway/app.py: xDS server, admin API, rollout controller), with:
- the spec from its ConfigMap (watched; a bad edit refused, reported as an Event, the last good kept),
- each `service:` variant's pods from its EndpointSlices (watched; Envoy gets each change),
- the rollout state in a ConfigMap (the controller's store, gateway/kubernetes/state.py), and leader
  election on a Lease: every replica serves xDS to the Envoys connected to it; only the leader runs the
  controller's analysis loop and writes the state, as each step happens; a new leader loads it first;
  the others apply the leader's state from their watch as it changes, so every Envoy gets the same split.
  The leader also records each rollout decision (gateway/rollout/story.py) as an Event on the state
  ConfigMap, so `kubectl get events` tells the rollout's story.
- with `capacity` settings, the leader's controller also sizes the variants' Deployments (or HPAs) from
  the split and waits for the candidate's pods before each step (gateway/kubernetes/capacity.py).

The leader labels its pod (gateway/kubernetes/role_label.py), so the chart's admin Service reaches it;
a follower refuses rollout commands and flips with 409, naming the leader. A flip through the admin API
reaches the Envoys of the leader only: to flip every replica, edit the spec ConfigMap
(`graystack weight --configmap`, `helm upgrade`).
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

from gateway.admin.api import Leadership
from gateway.admin.protocol import PickerStatus
from gateway.app import GatewayOptions, GatewayParts, GatewayProcess, serve_until_signalled
from gateway.kubernetes.api import api_client
from gateway.kubernetes.capacity import DeploymentCapacity
from gateway.kubernetes.endpoints import SERVICE_LABEL, EndpointSlices
from gateway.kubernetes.events import EventRecorder
from gateway.kubernetes.gateway_api import GatewayApiDataPlane
from gateway.kubernetes.leader import LeaderElector
from gateway.kubernetes.pool import PickerOptions, PoolPicker
from gateway.kubernetes.reflector import Reflector
from gateway.kubernetes.role_label import RoleLabel
from gateway.kubernetes.spec_source import SPEC_KEY, SpecConfigMap, origin, spec_from_configmap
from gateway.kubernetes.state import STATE_KEY, ConfigMapStateStore, lane_key, state_text
from gateway.rollout import telemetry
from gateway.rollout.capacity import CapacitySettings
from gateway.rollout.controller import RolloutController, Rollouts
from gateway.rollout.lanes import Lanes
from gateway.rollout.rollout_state import RolloutState
from gateway.rollout.state_store import decode_state
from gateway.rollout.story import storyteller
from gateway.service import Gateway
from gateway.spec.model import RolloutSpec, SpecError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KubernetesOptions:
    namespace: str
    spec_configmap: str
    state_configmap: str
    lease: str
    identity: str
    pod: str | None = None  # this replica's pod, labelled while it leads; None: no label (not in a pod)
    kubeconfig: str | None = None  # None in a pod: the service account
    context: str | None = None
    spec_key: str = SPEC_KEY
    lease_seconds: float = 15.0
    resync_seconds: float = 300.0
    watch_timeout: int = 60
    capacity: CapacitySettings | None = None  # None: the variants' replicas are left alone
    picker: PickerOptions | None = None  # where to serve the spec's `endpoint_picker`; None: nowhere


def gateway_options(kube: KubernetesOptions, **listen: Any) -> GatewayOptions:
    """GatewayOptions for Kubernetes mode: the spec's "path" names its ConfigMap (status, messages)."""
    return GatewayOptions(spec=Path(origin(kube.namespace, kube.spec_configmap)), **listen)


class ClusterSources:
    """What the gateway reads in the cluster, before it is built: the spec's and the state's ConfigMaps
    and the EndpointSlices (each a reflector: listed now, watched once the gateway serves), the Lease, and
    the state store that writes only while this replica holds it."""

    def __init__(self, kube: KubernetesOptions) -> None:
        self.kube = kube
        self.api = api_client(kube.kubeconfig, kube.context)
        discovery = client.DiscoveryV1Api(self.api)
        self.reflectors = {
            "spec": self._configmap_reflector(kube.spec_configmap),
            "state": self._configmap_reflector(kube.state_configmap),
            "endpoints": self._reflector(
                "endpointslices",
                functools.partial(
                    discovery.list_namespaced_endpoint_slice, kube.namespace, label_selector=SERVICE_LABEL
                ),
            ),
        }
        self.slices = EndpointSlices()
        self.elector = LeaderElector(
            self.api,
            kube.namespace,
            kube.lease,
            kube.identity,
            kube.lease_seconds,
            RoleLabel(self.api, kube.namespace, kube.pod).sync if kube.pod else lambda leading: None,
        )
        self.store = self.state_store(STATE_KEY)
        self.events = EventRecorder(
            self.api, kube.namespace, kube.state_configmap, kube.identity, lambda: self.elector.leading
        )

    def state_store(self, key: str) -> ConfigMapStateStore:
        """The state ConfigMap's store under `key`, written only while this replica leads."""
        return ConfigMapStateStore(
            self.api, self.kube.namespace, self.kube.state_configmap, lambda: self.elector.leading, key
        )

    def lane_store(self, lane: str) -> ConfigMapStateStore:
        """Where a candidate's lane keeps its state (gateway/rollout/lanes.py)."""
        return self.state_store(lane_key(lane))

    def _configmap_reflector(self, name: str) -> Reflector:
        """One ConfigMap, watched by name (what RBAC's resourceNames can allow for list and watch)."""
        core = client.CoreV1Api(self.api)
        list_call = functools.partial(
            core.list_namespaced_config_map, self.kube.namespace, field_selector=f"metadata.name={name}"
        )
        return self._reflector(f"configmap {name}", list_call)

    def _reflector(self, what: str, list_call: Callable[..., Any]) -> Reflector:
        return Reflector(
            what, list_call, resync=self.kube.resync_seconds, watch_timeout=self.kube.watch_timeout
        )

    def first_spec(self) -> tuple[RolloutSpec, str]:
        objects = self.reflectors["spec"].list_now()
        obj = objects.get(self.kube.spec_configmap)
        if obj is None:
            raise SpecError(f"{origin(self.kube.namespace, self.kube.spec_configmap)}: not found")
        return spec_from_configmap(obj, self.kube.spec_key)

    def leadership(self) -> Leadership:
        return Leadership(self.elector.leading, self.kube.identity, self.elector.holder or None)


class ClusterDriver:
    """Keeps the built gateway in step with the cluster: each spec edit and EndpointSlice change applied,
    the leader's state followed, and the controller's loop run only while this replica leads. Nothing
    runs beside the admin API: the spec and the state arrive by watch (the reflectors' threads)."""

    def __init__(self, sources: ClusterSources, gateway: Gateway, rollouts: Rollouts) -> None:
        self.sources = sources
        self.kube = sources.kube
        self.gateway = gateway
        self.rollouts = rollouts
        # one controller, or one per candidate's lane (gateway/rollout/lanes.py), each with its own key
        self.controllers = _controllers(rollouts)
        self.spec_source = SpecConfigMap(
            gateway,
            self.kube.spec_configmap,
            sources.events.report,
            self.kube.spec_key,
            gateway.file.sha256 if gateway.file else None,
        )
        live = gateway.live
        self.pool = (
            PoolPicker(sources.api, lambda: gateway.live, self.kube.picker)
            if self.kube.picker is not None and live.endpoint_picker is not None
            else None
        )
        self.placement = self.pool  # the user's gateway logs the answers of the pods it picks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._controller_task: asyncio.Task[None] | None = None
        self._background_tasks: set[asyncio.Task[None]] = set()

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return [self.pool.run()] if self.pool is not None else []

    def picker_status(self) -> PickerStatus | None:
        return self.pool.status() if self.pool is not None else None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sources.events.start(self._loop)
        handlers = {"spec": self._on_spec, "state": self._on_state, "endpoints": self._on_slices}
        for name, reflector in self.sources.reflectors.items():
            reflector.start(self._threadsafe(handlers[name]))
        self.sources.elector.start(self._threadsafe(self._on_leadership))
        if self.pool is not None:
            await self.pool.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self.sources.elector.stop)  # releases the Lease: a successor takes over now
        for reflector in self.sources.reflectors.values():
            await asyncio.to_thread(reflector.stop)
        await self._stop_controller()
        if self.pool is not None:
            await self.pool.stop()

    def _threadsafe(self, handler: Callable[[Any], None]) -> Callable[[Any], None]:
        """A callback for the reflector and elector threads that runs `handler` on the event loop."""

        def call(value: Any) -> None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(handler, value)

        return call

    # -- changes from the cluster (on the event loop) -----------------------------------------------

    def _on_spec(self, objects: dict[str, dict[str, Any]]) -> None:
        self.spec_source.apply(objects)

    def _on_slices(self, objects: dict[str, dict[str, Any]]) -> None:
        if not self.sources.slices.update(objects) or self.gateway.file is None:
            return
        try:  # the same spec, split and overrides, built again with the new endpoints
            self.gateway.set_rollout_split(self.gateway.rollout)
        except SpecError as error:
            log.error("new endpoints could not go live: %s", error)

    def _on_state(self, objects: dict[str, dict[str, Any]]) -> None:
        events = self.sources.events
        events.state_object = objects.get(self.kube.state_configmap, events.state_object)
        if self.sources.elector.leading:
            return  # the leader's own write coming back
        for controller in self.controllers:
            text = state_text(objects.get(self.kube.state_configmap), _key(controller))
            if not text:
                continue
            try:
                state = decode_state(text)
            except ValueError as error:
                log.warning("stored rollout state refused, keeping ours: %s", error)
                continue
            if state != controller.state:
                self._in_background(controller.resume(state))

    def _on_leadership(self, leading: bool) -> None:
        if leading:
            if self._controller_task is None or self._controller_task.done():  # never two loops
                self._controller_task = asyncio.create_task(self._lead())
        else:
            self._in_background(self._stop_controller())

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` on the loop, keeping a reference until it is done."""
        task = asyncio.create_task(work)
        self._background_tasks.add(task)
        task.add_done_callback(self._background_tasks.discard)

    async def _lead(self) -> None:
        """Resume from the stored state, then drive the rollout until leadership ends. The state is read
        again until it can be: a leader never drives from a guess."""
        for controller in self.controllers:
            await controller.resume(await self._read_state(controller))
            log.info("leading: rollout %s continues at %s", controller.spec.name, controller.state.label())
        await self.rollouts.run()

    async def _read_state(self, controller: RolloutController) -> RolloutState | None:
        while True:
            try:
                return await asyncio.to_thread(controller.saved.store.load)
            except Exception as error:
                log.warning("leading, but the rollout state cannot be read yet: %s", error)
                await asyncio.sleep(self.sources.elector.retry)

    async def _stop_controller(self) -> None:
        """Stop driving the rollout; the capacity this replica showed is the next leader's to show (a
        follower's stale replicas and cost would be summed with the leader's on the dashboards)."""
        task, self._controller_task = self._controller_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for controller in self.controllers:
            if controller.capacity is not None:
                controller.capacity.view = None
                telemetry.forget_capacity()


def _controllers(rollouts: Rollouts) -> list[RolloutController]:
    if isinstance(rollouts, Lanes):
        return list(rollouts.controllers.values())
    if isinstance(rollouts, RolloutController):
        return [rollouts]
    raise TypeError(f"the cluster's driver drives RolloutControllers, not {type(rollouts).__name__}")


def _key(controller: RolloutController) -> str:
    """The state ConfigMap's key `controller` saves under."""
    store = controller.saved.store
    return store.key if isinstance(store, ConfigMapStateStore) else STATE_KEY


def kubernetes_parts(kube: KubernetesOptions) -> GatewayParts:
    """The cluster's parts; lists the EndpointSlices now, the spec when the process asks (after it has
    checked its options) and the stored state as it restores: a gateway that cannot read them (or whose
    spec is invalid, with no last good one yet) does not start."""
    sources = ClusterSources(kube)
    sources.slices.update(sources.reflectors["endpoints"].list_now())
    capacity = (
        None if kube.capacity is None else DeploymentCapacity(sources.api, kube.namespace, kube.capacity)
    )
    return GatewayParts(
        first_spec=sources.first_spec,
        endpoints_for=sources.slices.endpoints_for,
        store=sources.store,
        driver=functools.partial(ClusterDriver, sources),
        capacity=capacity,
        leadership=sources.leadership,
        watchers=(storyteller(sources.events.tell),),
        user_gateway=functools.partial(GatewayApiDataPlane, sources.api),
        lane_store=sources.lane_store,
    )


def kubernetes_gateway(options: GatewayOptions, kube: KubernetesOptions) -> GatewayProcess:
    return GatewayProcess(options, kubernetes_parts(kube))


async def run_kube_gateway(options: GatewayOptions, kube: KubernetesOptions) -> None:
    await serve_until_signalled(kubernetes_gateway(options, kube))
