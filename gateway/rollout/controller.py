"""The rollout controller: the I/O edge around the pure look (gateway/rollout/look.py).

Every look (`analysis.look_interval`), and at once for an operator's command (admin API), it hands
`look` the counters (`provider.observe()`) and applies what came back: the split goes to every Envoy
through the Gateway, alerts are logged at WARNING and counted, decisions feed the metrics and
`graystack status`, new tests are logged with why, and the state is saved whenever it changed, so a
restarted gateway resumes the same stage, hold and evidence.

A step is done when its state is saved (gateway/rollout/state_store.py), under the controller's lock
(saves keep the steps' order). The split is pushed first, so a rollback reaches Envoy without waiting
for a disk or the API server; a failed save stops nothing. A rollback is then confirmed proxy by proxy
(gateway/rollout/fleet.py: `ack_deadline` at a time, alerting past each).

The split it wants and what status shows: gateway/rollout/views.py; alerts, the last decision and
why the tests started: gateway/rollout/journal.py. Capacity (Kubernetes mode, opt-in): each look first
asks the capacity edge (gateway/rollout/capacity.py) to scale the variants for the live split, and
whether the candidate's next pods are ready. Step webhooks run in the background
(gateway/rollout/webhooks.py), their answer handed to the next look. Each look and rollback
confirmation is told to the `watchers` (gateway/rollout/facts.py): notifications, Kubernetes Events.

The user's own Gateway API gateway (issue 36) has no proxies of graystack's to ACK anything: there the
`split_proofs` edge (gateway/kubernetes/gateway_api.py) writes the split into the HTTPRoutes and
proves it served, and each look hands the machine its `SplitGate`. A stage advances, and a rollback is
done, only once both of its proofs hold for the split asked.

Without a metrics source (no `--envoy-admin` for `direct`, or a provider that cannot be built) the
guard is off (gateway/rollout/guard.py), and says so in status: no analysis runs, the strategy moves
only by operator commands.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from gateway.metrics.observations import Observations
from gateway.rollout import telemetry
from gateway.rollout.analysis import Verdict
from gateway.rollout.capacity import CapacityEdge, per_million_tokens
from gateway.rollout.facts import Looked, RollbackAcked, RollbackConfirmedLate, Watcher, tell
from gateway.rollout.fleet import Proxies, RollbackConfirmation
from gateway.rollout.guard import Guard, ProviderFactory
from gateway.rollout.journal import Journal
from gateway.rollout.look import Carried, look
from gateway.rollout.machine import initial_state, rollback_acked
from gateway.rollout.plan import CHECK_NAMES
from gateway.rollout.rollout_state import (
    CONTROL_PLANE,
    Alert,
    CallWebhooks,
    CapacityGate,
    Command,
    Ignored,
    Phase,
    RecordDecision,
    RolledBack,
    RolloutState,
    SplitGate,
    WebhookOutcome,
)
from gateway.rollout.state_store import SavedState, StateStore
from gateway.rollout.status import RolloutStatus
from gateway.rollout.views import experiment_status, rollout_split, rollout_status, stage_of
from gateway.rollout.webhooks import WebhookCalls
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.split import RolloutSplit

log = logging.getLogger(__name__)

ACK_DEADLINE = 10.0  # seconds for every proxy to ACK a rollback before the controller alerts


class SplitTarget(Protocol):
    """The controller's edge on the gateway (gateway/service.py's `Gateway`): the spec file's spec, the
    live spec, and the rollout's own layer of the split, which it sets."""

    @property
    def spec(self) -> RolloutSpec: ...

    @property
    def live(self) -> RolloutSpec: ...

    @property
    def rollout(self) -> RolloutSplit: ...

    def set_rollout_split(self, rollout: RolloutSplit) -> RolloutSpec: ...


class SplitProofs(Protocol):
    """The proofs that the user's gateway serves the live split (gateway/kubernetes/gateway_api.py)."""

    async def look(self, live: RolloutSpec, now: float) -> SplitGate: ...


class Rollouts(Protocol):
    """What the admin API and a driver ask of the rollout: a `RolloutController`, or several candidates'
    lanes (gateway/rollout/lanes.py)."""

    def restore(self) -> None: ...

    async def run(self) -> None: ...

    async def command(self, command: Command, candidate: str | None = None) -> str | None: ...

    def status(self) -> RolloutStatus: ...


class RolloutController:
    def __init__(
        self,
        gateway: SplitTarget,
        proxies: Proxies,
        make_provider: ProviderFactory,
        store: StateStore,
        clock: Callable[[], float] = time.time,
        ack_deadline: float = ACK_DEADLINE,
        capacity: CapacityEdge | None = None,
        watchers: Sequence[Watcher] = (),
        split_proofs: SplitProofs | None = None,
    ) -> None:
        """`clock` is wall time: the state (and its hold) is saved and read back across restarts.
        `watchers`: told every look and rollback confirmation (notifications, Kubernetes Events).
        `split_proofs`: the user's gateway serves the split (None: graystack's Envoys, by xDS)."""
        self.gateway = gateway
        self.proxies = proxies
        self.guard = Guard(make_provider)
        self._clock = clock
        self.ack_deadline = ack_deadline
        self.capacity = capacity
        self.split_proofs = split_proofs
        self._lock = asyncio.Lock()
        self._state: RolloutState | None = None  # restore() or resume() sets the first
        self.journal = Journal(lambda: self.spec.name, clock)
        self.saved = SavedState(store, lambda: self.spec.name, self.journal.alert)
        self._carried = Carried()  # what the last look left the next
        self.watchers = tuple(watchers)
        self.rollback = RollbackConfirmation(
            proxies,
            lambda: self.state,
            self._rollback_acked,
            self._lock,
            clock,
            self.journal.alert,
            lambda nodes: tell(self.watchers, RollbackConfirmedLate(self.spec, tuple(nodes), self._clock())),
        )
        self.webhooks = WebhookCalls(clock)

    @property
    def spec(self) -> RolloutSpec:
        return self.gateway.spec

    @property
    def state(self) -> RolloutState:
        if self._state is None:
            raise RuntimeError("the rollout's state is read before restore() or resume() set it")
        return self._state

    @state.setter
    def state(self, state: RolloutState) -> None:
        self._state = state

    # -- lifecycle --------------------------------------------------------------------------------

    def restore(self) -> None:
        """At start, before serving: load the saved state (or start the rollout), fit it to the spec, put
        its split live, and save it (here on the caller's thread: there is no event loop to keep free yet)."""
        self._resume(self.saved.store.load())
        self.saved.save_now(self.state)

    async def resume(self, saved: RolloutState | None) -> None:
        """Continue from `saved`, a state the caller read from the store (a new leader's, or the
        leader's as a follower sees it; None: start the rollout), as `restore` does."""
        async with self._lock:
            self._resume(saved)
            await self.saved.save(self.state)

    def _resume(self, saved: RolloutState | None) -> None:
        now = self._clock()
        state = saved if saved is not None else initial_state(self.spec, now)
        telemetry.zero_rollout_series(self.spec.name, CHECK_NAMES, [v.value for v in Verdict])
        log.info("rollout %s: %s %s", self.spec.name, "resumed at" if saved else "starting at", state.label())
        self.state, self.saved.stored = state, saved
        self._look(self.spec, now)

    async def run(self) -> None:
        """The analysis loop, until cancelled."""
        try:
            if self.state.rollback_started is not None:  # killed before the rollback was ACKed
                self._confirm_rollback()
            while True:
                try:
                    await self.tick()
                except Exception:  # the guard must outlive any one bad interval
                    log.exception("rollout analysis interval failed")
                await asyncio.sleep(self.spec.analysis.look_interval)
        finally:
            self.guard.close()
            await self.rollback.stop()
            await self.webhooks.stop()

    async def command(self, command: Command, candidate: str | None = None) -> str | None:
        """An operator command, applied now; None where it was applied, else why it was ignored.
        `candidate`: the one it is meant for (None: this rollout's)."""
        if candidate is not None and candidate not in self.spec.candidates[:1]:
            return f"no candidate {candidate!r} in this rollout (its candidate: {', '.join(self.spec.candidates[:1])})"
        async with self._lock:
            ignored = self._look(self.spec, self._clock(), command=command)
            await self.saved.save(self.state)
        return ignored

    # -- one interval -----------------------------------------------------------------------------

    async def tick(self) -> None:
        """One look: measure, then judge, step and apply (`look`), and save."""
        spec = self.spec
        capacity = await self._capacity_look(spec)  # replicas follow the split even with the guard off
        split = await self._split_look()
        provider = self.guard.provider_for(spec)
        if provider is None:
            return
        # Asked before the scrape: a proxy that connects during it was not up for it.
        if not self._carried.proxy_seen and self._data_plane_seen(split):
            self._carried = replace(self._carried, proxy_seen=True)
        seen = await provider.observe()
        async with self._lock:
            now = self._clock()
            webhook = self.webhooks.take()
            self._look(spec, now, seen=seen, capacity=capacity, webhook=webhook, split=split)
            if split is not None and split.proven and split.asked == self.gateway.live.routing.weights:
                await self._rollback_acked(now)  # nothing to do unless a rollback is in flight
            await self.saved.save(self.state)

    async def _split_look(self) -> SplitGate | None:
        if self.split_proofs is None:
            return None
        return await self.split_proofs.look(self.gateway.live, self._clock())

    def _data_plane_seen(self, split: SplitGate | None) -> bool:
        """A proxy of ours connected, or the user's gateway took the route (its control plane's proof)."""
        if split is not None:
            return split.waiting_on != CONTROL_PLANE
        return any(stream.key for stream in self.proxies.streams())

    async def _capacity_look(self, spec: RolloutSpec) -> CapacityGate | None:
        if self.capacity is None:
            return None
        routing = self.gateway.live.routing
        gate = await asyncio.to_thread(self.capacity.look, spec, self.state, routing, self._clock())
        telemetry.record_capacity(spec.name, self.capacity.view or {})
        return gate

    def _look(
        self,
        spec: RolloutSpec,
        now: float,
        *,
        seen: Observations | None = None,
        command: Command | None = None,
        capacity: CapacityGate | None = None,
        webhook: WebhookOutcome | None = None,
        split: SplitGate | None = None,
    ) -> str | None:
        """Look (gateway/rollout/look.py) and apply what it decided but the save (the caller's); returns
        why `command` was ignored (None: it was not)."""
        done = look(
            spec,
            self.state,
            self._carried,
            now,
            seen=seen,
            command=command,
            capacity=capacity,
            webhook=webhook,
            split=split,
        )
        if done.tests_started is not None:
            self.journal.new_tests(done.tests_started)
        before, state = self.state, done.state
        if done.tests_started is not None or stage_of(state) != stage_of(before):
            self.guard.new_count()  # with cohorts, each client counts once per stage (client_units.py)
        self._carried = done.carried
        ignored = None
        decision = None
        for action in done.actions:
            if isinstance(action, Alert):
                self.journal.alert(action.message, now)
            elif isinstance(action, RecordDecision):
                decision = action
                self.journal.decision(action, state, now)
            elif isinstance(action, Ignored):
                ignored = action.reason
                log.info("rollout %s: %s ignored: %s", spec.name, action.command.value, action.reason)
            elif isinstance(action, RolledBack):
                telemetry.ROLLBACKS.labels(spec.name, action.reason).inc()
            elif isinstance(action, CallWebhooks):
                self.webhooks.start(spec, action.step)
        self.state = state
        if state.label() != before.label():
            log.info("rollout %s: %s -> %s: %s", spec.name, before.label(), state.label(), state.reason)
        self._push(spec, state)
        telemetry.record_phase(spec.name, state.phase.value, [phase.value for phase in Phase])
        telemetry.record_experiment(spec.name, experiment_status(spec, state, now))
        if state.rollback_started is not None and before.rollback_started != state.rollback_started:
            self._confirm_rollback()
        tell(self.watchers, Looked(spec, before, state, decision, now, done.actions))
        return ignored

    def _push(self, spec: RolloutSpec, state: RolloutState) -> None:
        try:
            wanted = rollout_split(spec, state)
            if wanted != self.gateway.rollout:
                self.gateway.set_rollout_split(wanted)
        except SpecError as error:
            self.journal.alert(
                f"cannot apply the rollout's split ({state.label()}), retrying next interval: {error}"
            )

    # -- rollback ACK -----------------------------------------------------------------------------

    def _confirm_rollback(self) -> None:
        """Wait for every proxy's ACK; on the user's gateway, each look's proofs confirm it instead."""
        if self.split_proofs is None:
            self.rollback.start(self.ack_deadline)

    async def _rollback_acked(self, now: float) -> None:
        """Every connected proxy ACKed the rollback, or the user's gateway is proven to serve it (under
        the lock): it is done; save that."""
        state, seconds = rollback_acked(self.state, now)
        if seconds is None:
            return
        self.state, self.rollback.last_seconds = state, seconds
        telemetry.ROLLBACK_SECONDS.labels(self.spec.name).observe(seconds)
        proxies = len(self.proxies.streams())
        log.info("rollout %s: rollback ACKed by all %d proxies, %.3fs on", self.spec.name, proxies, seconds)
        pending = tuple(proxy.node for proxy in self.proxies.disconnected())
        tell(self.watchers, RollbackAcked(self.spec, state, seconds, pending, now))
        await self.saved.save(self.state)

    # -- reading ----------------------------------------------------------------------------------
    def status(self) -> RolloutStatus:
        return rollout_status(
            self.spec,
            self.state,
            self._clock(),
            guard_off=self.guard.off,
            last_rollback_seconds=self.rollback.last_seconds,
            last_decision=self.journal.last_decision,
            alerts=list(self.journal.alerts),
            tests_started=self.journal.tests_started,
            store=self.saved.store.where,
            save_error=self.saved.error,
            rollback_pending=self.rollback.cut_off.pending,
            capacity=per_million_tokens(self.capacity.view, self._carried.token_rates.per_second())
            if self.capacity
            else None,
        )
