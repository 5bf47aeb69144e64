"""The gateway process: the xDS server, the rollout controller and the admin API in one asyncio process,
given its parts by a mode (files: gateway/local.py, `graystack gateway`; a cluster:
gateway/kubernetes/process.py, `graystack kube-gateway`).

The controller always runs: with a `strategy` it moves the rollout, without one (manual mode) it still
guards the live split. Its metrics source: `provider: {type: prometheus}` asks the spec's URL;
`{type: direct}` scrapes Envoy's admin (`envoy_admin`) and the pods' /metrics (`metrics_targets`),
which the spec does not name, so they are options; without `envoy_admin` the guard is off and
`graystack status` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import uvicorn

from gateway.admin.api import Leadership, create_admin_app, fault_injection_refusal
from gateway.admin.protocol import PickerStatus
from gateway.answers.entries import Placement
from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from gateway.envoy.resources import EndpointMap
from gateway.epp.envoys import EnvoysPicker
from gateway.errors import Refused
from gateway.metrics.answered import WithAnswers
from gateway.metrics.direct import DirectProvider
from gateway.metrics.prometheus import PrometheusProvider
from gateway.metrics.provider import MetricsProvider
from gateway.metrics.queries import histogram_queries
from gateway.notify.notifier import Notifier
from gateway.quality.counts import QualityCounts
from gateway.quality.judge import Budget, Judge, read_template
from gateway.quality.judging import Judging
from gateway.rollout.capacity import CapacityEdge
from gateway.rollout.controller import RolloutController, Rollouts, SplitProofs
from gateway.rollout.facts import Watcher
from gateway.rollout.guard import ProviderFactory, ProviderUnavailable
from gateway.rollout.lanes import Lanes
from gateway.rollout.state_store import StateStore
from gateway.service import Gateway
from gateway.spec.envoy_picker import served
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.quality import Quality
from gateway.xds.cache import SnapshotCache
from gateway.xds.server import FORGET_AFTER_S, AdsServer, start_server

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayOptions:
    spec: Path
    xds_host: str = "127.0.0.1"
    xds_port: int = 18000
    admin_host: str = "127.0.0.1"
    admin_port: int = 9000
    admin_token: str | None = None
    poll_interval: float = 0.25
    envoy_admin: str | None = None  # Envoy's admin base URL, for the `direct` metrics provider
    metrics_targets: tuple[str, ...] = ()  # the pods' /metrics URLs (model servers and probes)
    state_path: Path | None = None  # the rollout state file (local mode); None: `<spec>.state.json`
    enable_fault_injection: bool = False  # take `graystack fault` (PUT /v1/faults/{variant})
    forget_proxies_after: float = FORGET_AFTER_S  # a disconnected proxy is listed (and awaited) this long
    picker_host: str = "127.0.0.1"  # where the picker for its own Envoy binds (`envoy_picker.serve`)

    @property
    def rollout_state_path(self) -> Path:
        return self.state_path or self.spec.with_name(self.spec.name + ".state.json")


def provider_factory(envoy_admin: str | None, targets: tuple[str, ...]) -> ProviderFactory:
    """Builds the spec's metrics provider; ProviderUnavailable (the guard is off) says what is missing."""

    def make(spec: RolloutSpec) -> MetricsProvider:
        source, variants, fallback = spec.analysis.provider, list(spec.variants), spec.retries.fallback
        histograms = source.histograms or {}
        if source.type == "prometheus":
            if source.url is None:  # the spec refuses it (Provider._prometheus_needs_a_url)
                raise ProviderUnavailable("the prometheus provider has no url: the guard is off")
            queries = {**histogram_queries(histograms), **(source.queries or {})}
            return PrometheusProvider(source.url, variants, fallback, queries, attempts=spec.retries.attempts)
        if spec.users_gateway:  # no Envoy of ours: the answers are the requests
            return DirectProvider(None, list(targets), variants, fallback, histograms=histograms)
        if envoy_admin is None:
            raise ProviderUnavailable(
                "no metrics source configured: the guard is off "
                "(set --envoy-admin / GRAYSTACK_ENVOY_ADMIN, and --metrics-target for the pods)"
            )
        attempts = spec.retries.attempts
        return DirectProvider(
            envoy_admin, list(targets), variants, fallback, histograms=histograms, attempts=attempts
        )

    return make


class _EmbeddedUvicorn(uvicorn.Server):
    """uvicorn inside our loop: signals are ours to handle, not uvicorn's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Driver(Protocol):
    """What keeps a built gateway current and moves its rollout: a mode's spec source and watches.
    `placement`: where the answers come from a gateway of the user's that the driver knows the pods of
    (the spec's endpoint_picker), how each is placed; None: graystack's Envoy names each answer's variant."""

    @property
    def placement(self) -> Placement | None: ...

    def picker_status(self) -> PickerStatus | None:
        """The Endpoint Picker's part of the status, where the driver serves one; asked at every status call."""
        ...

    def background(self) -> list[Coroutine[Any, Any, None]]:
        """What runs beside the admin API until the process stops (cancelled then)."""
        ...

    async def start(self) -> None:
        """Once the admin API serves."""

    async def stop(self) -> None:
        """First thing at stop, while the admin API still serves."""


class UserGateway(SplitProofs, Placement, Protocol):
    """The user's own Gateway API gateway (issue 36, gateway/kubernetes/gateway_api.py): the controller's
    proofs, the answer receiver's placement, and the writer of the live split, run beside the admin API."""

    async def run(self) -> None: ...


UserGatewayFactory = Callable[[AnswerStore, Callable[[], RolloutSpec], Callable[[], bool]], UserGateway]


def _alone() -> Leadership | None:
    return None


@dataclass(frozen=True)
class GatewayParts:
    """What a mode gives the process (go-control-plane's `NewServer(ctx, watcher, callbacks)` shape):
    gateway/local.py assembles them from files, gateway/kubernetes/process.py from the cluster.

    `first_spec()`: the spec and the hash of its text, read once the process has checked its options;
    with no last good spec yet, a bad one stops the process there. `driver`: called with the gateway and
    the controller the process built. `leadership()`: asked at every admin call; None where this process
    alone drives the rollout."""

    first_spec: Callable[[], tuple[RolloutSpec, str]]
    endpoints_for: Callable[[RolloutSpec], EndpointMap]
    store: StateStore
    driver: Callable[[Gateway, Rollouts], Driver]
    capacity: CapacityEdge | None = None  # what scales the variants from the split; None: nothing does
    leadership: Callable[[], Leadership | None] = _alone
    watchers: tuple[Watcher, ...] = ()  # told every look of the rollout, beside the notifications
    # the rollout drives the user's Gateway API gateway where the first spec names one (`gateway_api`):
    # called with the answer store, the live spec and whether this replica leads
    user_gateway: UserGatewayFactory | None = None
    # where each candidate's lane saves its state, in a rollout of several (called with the lane's name);
    # None: this mode rolls out one candidate at a time
    lane_store: Callable[[str], StateStore] | None = None


class GatewayProcess:
    """The gateway's parts wired together; `start`/`stop` so tests and benchmarks can embed it."""

    def __init__(self, options: GatewayOptions, parts: GatewayParts) -> None:
        if not _is_loopback(options.admin_host) and not options.admin_token:
            raise Refused(
                f"refusing to serve the admin API on {options.admin_host} without a token: "
                "set --admin-token (GRAYSTACK_ADMIN_TOKEN) or bind to 127.0.0.1"
            )
        self.options = options
        spec, digest = parts.first_spec()  # no last good spec yet: a bad one stops here
        self.cache = SnapshotCache()
        fault_refusal = fault_injection_refusal(
            options.enable_fault_injection, _is_loopback(options.admin_host), options.admin_token
        )
        # Notifications (gateway/notify/): told every look and refusal, by the leader only (a follower
        # follows the leader's state, and would tell every step again); they queue, never wait.
        self.leadership = parts.leadership
        self.notifier = Notifier(lambda: self.gateway.spec, leading=self._leading)
        # Every answer Envoy measured (gateway/answers/), reported on the xDS port: the store is what
        # the rollout's looks will read.
        self.answers = AnswerStore()
        self.user_gateway = (
            parts.user_gateway(self.answers, lambda: self.gateway.live, self._leading)
            if parts.user_gateway is not None and spec.gateway_api is not None
            else None
        )
        self.gateway = Gateway(
            self.cache,
            options.spec,
            parts.endpoints_for,
            fault_injection=fault_refusal is None,
            on_refused=(self.notifier.on_refused,),
            drives_routes=self.user_gateway is not None,
        )
        self.gateway.load(spec, digest)
        if self.gateway.last_error:
            raise SpecError(self.gateway.last_error["message"])
        self.ads = AdsServer(
            self.cache, on_connect=self.gateway.on_connect, forget_after=self.options.forget_proxies_after
        )
        self.controller = self._rollouts(parts)
        self.controller.restore()
        self.driver = parts.driver(self.gateway, self.controller)
        # its own Envoy's picker, where the first spec has it served here (kept as started: gateway/service.py)
        self.envoys_picker = (
            EnvoysPicker(lambda: self.gateway.live, self.gateway.endpoints)
            if served(spec.envoy_picker)
            else None
        )
        self.admin = _EmbeddedUvicorn(
            uvicorn.Config(
                create_admin_app(
                    self.gateway,
                    self.ads,
                    options.admin_token,
                    self.controller,
                    parts.leadership,
                    fault_refusal,
                    self.answers,
                    self.notifier.status,
                    self.envoys_picker.status if self.envoys_picker else self.driver.picker_status,
                ),
                host=options.admin_host,
                port=options.admin_port,
                log_level="warning",
                lifespan="off",
            )
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._admin_task: asyncio.Task[None] | None = None
        self._grpc = None

    def _rollouts(self, parts: GatewayParts) -> Rollouts:
        """One controller, or a lane for each of several candidates (gateway/rollout/lanes.py)."""
        provider = self._measured(provider_factory(self.options.envoy_admin, self.options.metrics_targets))
        watchers = (self.notifier.on_fact, *parts.watchers)
        candidates = self.gateway.lanes
        if not candidates:
            return RolloutController(
                self.gateway,
                self.ads,
                provider,
                parts.store,
                capacity=parts.capacity,
                watchers=watchers,
                split_proofs=self.user_gateway,
            )
        store_for = parts.lane_store
        if parts.capacity is not None:
            raise Refused(
                f"variants: several candidates ({', '.join(candidates)}) with the capacity controller: it "
                "scales the pods of one candidate for now; roll them out without it, or one at a time"
            )
        if store_for is None:
            raise Refused(
                f"variants: several candidates ({', '.join(candidates)}) each keep a rollout state of their "
                "own, and this mode keeps one"
            )
        return Lanes(self.gateway, candidates, self.ads, provider, store_for, watchers=watchers)

    def _placement(self) -> Placement | None:
        return self.user_gateway if self.user_gateway is not None else self.driver.placement

    def _leading(self) -> bool:
        leadership = self.leadership()
        return leadership is None or leadership.leading

    def _digests_only(self) -> bool:
        quality = self.gateway.live.analysis.quality
        return quality is not None and quality.keep == "digest"

    def _measured(self, make: ProviderFactory) -> ProviderFactory:
        """Each provider's looks with the answers this gateway measured added (gateway/metrics/answered.py)."""
        return lambda spec: WithAnswers(
            make(spec),
            self.answers,
            clients=bool(spec.routing.affinity),
            quality=quality_counts(spec.analysis.quality),
            traffic=spec.users_gateway,
        )

    async def start(self) -> None:
        self._grpc = await start_server(
            self.ads,
            self.options.xds_host,
            self.options.xds_port,
            also=[
                AnswerReceiver(
                    self.answers,
                    self._leading,
                    self._digests_only,
                    self._placement(),
                    self.envoys_picker.picker.ended if self.envoys_picker is not None else None,
                ).register
            ],
        )
        background = [*self.driver.background(), *([self.user_gateway.run()] if self.user_gateway else [])]
        if self.envoys_picker is not None:
            await self.envoys_picker.start(self.options.picker_host)
            background.append(self.envoys_picker.run())
        self._admin_task = asyncio.create_task(self.admin.serve())
        self._tasks = [self._admin_task, *(asyncio.create_task(work) for work in background)]
        self.notifier.start()  # what restore() told before the event loop ran
        while not self.admin.started:
            if self._admin_task.done():
                self._admin_task.result()
                raise OSError(
                    f"admin API did not start on {self.options.admin_host}:{self.options.admin_port}"
                )
            await asyncio.sleep(0.01)
        log.info(
            "gateway %r: xDS on %s:%d, admin on %s:%d, watching %s",
            self.gateway.live.name,
            self.options.xds_host,
            self.options.xds_port,
            self.options.admin_host,
            self.options.admin_port,
            self.options.spec,
        )
        await self.driver.start()

    async def wait(self) -> None:
        """Until the admin server exits (stop() or a signal)."""
        if self._admin_task is None:
            raise RuntimeError("wait() before start()")
        await self._admin_task

    async def stop(self) -> None:
        await self.driver.stop()
        if self.envoys_picker is not None:
            await self.envoys_picker.stop()
        self.admin.should_exit = True
        for task in self._tasks:
            if task is not self._admin_task:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.notifier.stop()
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        log.info("gateway stopped")


async def serve_until_signalled(process: GatewayProcess) -> None:
    """Start `process`, serve until SIGINT/SIGTERM, stop it."""
    await process.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(process.admin, "should_exit", True))
    try:
        await process.wait()
    finally:
        await process.stop()


def quality_counts(quality: Quality | None) -> QualityCounts | None:
    """The answer-quality counts `analysis.quality` asks for, with its judge in the background (None:
    no quality section, nothing captured). SpecError where the judge's prompt file cannot be used (the
    guard is then off and says why; the gateway refused such a spec on load, so the file changed since)."""
    if quality is None:
        return None
    judge = quality.judge
    if judge is None:
        return QualityCounts()
    return QualityCounts(
        Judging(
            Judge(
                judge.url,
                judge.model,
                Budget(judge.budget_per_hour),
                template=read_template(judge.prompt),
                timeout=judge.timeout,
            )
        )
    )
