"""The rollout controller: the I/O edge around the pure state machine (gateway/rollout/machine.py).

Every look (`analysis.look_interval`) it reads the counters (`provider.observe()`), adds the look's
increments to the rollout's sequential tests (gateway/rollout/evidence.py, kept in the state), judges
them (`analyse`), steps the machine, and applies what the machine asked for: the split goes to every
Envoy through the Gateway, alerts are logged at WARNING and counted, decisions feed the metrics and
`graystack status`, and the state is saved whenever it changed, so a restarted gateway resumes the same
stage with the hold it had accrued and the same tests with the evidence they had gathered (the first
look of a new process only sets where the counters start; a state without evidence for this plan
starts new tests, logged with why). Operator commands (admin API) step the machine at once.

Persistence: the controller is given a `StateStore` (gateway/rollout/state_store.py: a file in local
mode, the state ConfigMap in Kubernetes mode). A step is done when its state is saved: `tick` and
`command` return after the save (run off the event loop, under the controller's lock, so saves keep the
steps' order), never on a timer. The split is pushed before the save, so a rollback reaches Envoy
without waiting for a disk or the API server. A save that fails (disk full, API server unreachable)
does not stop the controller or the gateway: the first failure of a run raises an alert (logged,
counted in graystack_rollout_alerts_total, in status), later ones are logged, status shows the error,
and the state is saved again at every step (each interval, each command) until a save succeeds.

The split the controller wants, and what status shows of the rollout: gateway/rollout/views.py.

Roles: the baseline is `retries.fallback`, else the variant named `baseline`; the candidate is the
first other variant in the spec (the one the strategy's weights are about). Both name Envoy clusters.

Rollback: after the push, a task waits for every connected Envoy's ACK (`ack_deadline` at a time),
then calls `rollback_acked` and observes graystack_rollback_seconds; past each deadline it alerts,
naming the proxies that have not ACKed, and keeps waiting. Proxies cut off from the control plane are
then awaited until they reconnect and ACK, and shown as pending meanwhile (gateway/rollout/fleet.py).

Shadow: the machine's shadow percent becomes Envoy request mirroring (`routing.mirror`): copies of
that share of the requests go to the candidate's `<candidate>-shadow` cluster, their answers are
discarded, and the providers count them as the candidate's, so the shadow phase is judged on them.

Capacity (Kubernetes mode, opt-in): each look first asks the capacity edge (`capacity`,
gateway/rollout/capacity.py) to scale the variants for the live split and whether the candidate's pods
for the next weight are ready; the machine waits for them before it advances. Status shows the look.

Without a metrics source (no `--envoy-admin` for `direct`, or a provider that cannot be built) the
guard is off, and says so in status: no analysis runs, the strategy moves only by operator commands.

Before the first proxy connects: an interval whose metrics cannot be read is inconclusive ("no proxy
connected yet"), not an error. A gateway starts before its Envoy (the `direct` provider then finds
Envoy's admin refusing connections), and until a proxy connects no request follows the split this
controller sets, so there is nothing to judge and no fault to escalate. Once one has connected, an
unreadable source is an error again, even after every proxy has gone: an Envoy that dies mid-rollout
is a fault `analysis.on_error` must see (without Prometheus, its alert is the only one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from gateway.metrics.observations import Observations
from gateway.metrics.provider import MetricsProvider
from gateway.rollout import evidence as tests
from gateway.rollout import telemetry
from gateway.rollout.analysis import Check, Verdict, analyse, error_checks
from gateway.rollout.capacity import CapacityEdge, per_million_tokens
from gateway.rollout.fleet import CutOff, Proxies, ack_timeout_message
from gateway.rollout.increments import Counters, increase, per_variant
from gateway.rollout.machine import initial_state, rollback_acked, step
from gateway.rollout.plan import CHECK_NAMES, Plan, plan_for, roles
from gateway.rollout.rollout_state import (
    Alert,
    CapacityGate,
    Command,
    Ignored,
    Phase,
    RecordDecision,
    RolloutState,
)
from gateway.rollout.state_store import StateStore
from gateway.rollout.throughput import TokenRates
from gateway.rollout.views import check_dict, rollback_reason, rollout_split, rollout_status, stage_of
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.split import RolloutSplit

log = logging.getLogger(__name__)

ACK_DEADLINE = 10.0  # seconds for every proxy to ACK a rollback before the controller alerts
ALERTS_KEPT = 10  # recent alerts shown in status


class ProviderUnavailable(Exception):
    """No metrics source can be built for this spec; the message says why (shown in status)."""


ProviderFactory = Callable[[RolloutSpec], MetricsProvider]


class SplitTarget(Protocol):
    """The controller's edge on the gateway (gateway/service.py's `Gateway`): the spec file's spec, the
    live spec, and the rollout's own layer of the split, which it sets."""

    @property
    def spec(self) -> RolloutSpec: ...

    @property
    def live(self) -> RolloutSpec | None: ...

    @property
    def rollout(self) -> RolloutSplit: ...

    def set_rollout_split(self, rollout: RolloutSplit) -> RolloutSpec: ...


def _not_yet_measurable(check: Check) -> Check:
    """`check` from before any proxy connected: an error becomes a hold that keeps the provider's
    message; any other verdict stands (a probe's evidence against the checkpoint rolls back now)."""
    if check.verdict != Verdict.ERROR:
        return check
    return replace(check, verdict=Verdict.INCONCLUSIVE, reason=f"no proxy connected yet ({check.reason})")


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
    ) -> None:
        """`clock` is wall time: the state (and its hold) is saved and read back across restarts."""
        self.gateway = gateway
        self.proxies = proxies
        self.store = store
        self._make_provider = make_provider
        self._clock = clock
        self.ack_deadline = ack_deadline
        self.capacity = capacity
        self._lock = asyncio.Lock()
        self._provider: MetricsProvider | None = None
        self._provider_key: tuple | None = None
        self.guard_off: str | None = None
        self.token_rates = TokenRates()  # for the capacity view's cost per million generated tokens
        self.state: RolloutState | None = None
        self._stored: RolloutState | None = None  # what the store holds, as far as we know
        self.save_error: str | None = None  # the last save's failure, until a save succeeds
        self.last_decision: dict | None = None
        self.last_rollback_seconds: float | None = None
        self.alerts: deque[dict] = deque(maxlen=ALERTS_KEPT)
        self._confirm: asyncio.Task | None = None
        self.cut_off = CutOff()  # proxies cut off before they ACKed the rollback
        self._proxy_seen = False  # a proxy has connected since this controller started
        self._counters: Counters | None = None  # the last look's counters, for the next look's increments
        self.tests_started: str | None = None  # why the current tests started (a new test is logged)

    @property
    def spec(self) -> RolloutSpec:
        return self.gateway.spec

    # -- lifecycle --------------------------------------------------------------------------------

    def restore(self) -> None:
        """At start, before serving: load the saved state (or start the rollout), fit it to the spec, put
        its split live, and save it (here on the caller's thread: there is no event loop to keep free yet)."""
        self._resume(self.store.load())
        if self.state != self._stored:
            self._save_result(self.state, self._call_store(self.store.save, self.state))

    async def resume(self, saved: RolloutState | None) -> None:
        """Continue from `saved`, a state the caller read from the store (a new leader's, or the
        leader's as a follower sees it; None: start the rollout), as `restore` does."""
        async with self._lock:
            self._resume(saved)
            await self._save()

    def _resume(self, saved: RolloutState | None) -> None:
        now = self._clock()
        state = saved if saved is not None else initial_state(self.spec, now)
        telemetry.zero_rollout_series(self.spec.name, CHECK_NAMES, [v.value for v in Verdict])
        log.info("rollout %s: %s %s", self.spec.name, "resumed at" if saved else "starting at", state.label())
        self.state, self._stored = state, saved
        self._step(self.spec, None, None, now)

    async def run(self) -> None:
        """The analysis loop, until cancelled."""
        try:
            if self.state.rollback_started is not None:  # killed before the rollback was ACKed
                self._confirm_rollback_later()
            while True:
                try:
                    await self.tick()
                except Exception:  # the guard must outlive any one bad interval
                    log.exception("rollout analysis interval failed")
                await asyncio.sleep(self.spec.analysis.look_interval)
        finally:
            if self._confirm is not None:
                self._confirm.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._confirm

    async def command(self, command: Command) -> dict:
        """An operator command, applied now; says whether it was applied or why it was ignored."""
        async with self._lock:
            ignored = self._step(self.spec, None, command, self._clock())
            await self._save()
        return {"command": command.value, "applied": ignored is None, "ignored": ignored}

    # -- one interval -----------------------------------------------------------------------------

    async def tick(self) -> None:
        """One look: measure, add to the evidence, judge, step, apply."""
        spec = self.spec
        capacity = await self._capacity_look(spec)  # replicas follow the split even with the guard off
        provider = self._provider_for(spec)
        if provider is None:
            return
        proxy_seen = self._proxy_connected()  # asked first: a proxy connecting mid-scrape was not up for it
        seen = await provider.observe()
        async with self._lock:
            now = self._clock()
            checks = self._judge(spec, seen, now)
            if not proxy_seen:
                checks = [_not_yet_measurable(check) for check in checks]
            self._step(spec, checks, None, now, capacity)
            await self._save()

    def _judge(self, spec: RolloutSpec, seen: Observations, now: float) -> list[Check]:
        """The look's checks, with its increments added to the state's evidence first. An unreadable
        look adds nothing: the next one's increments cover it (a lost look merges into the next)."""
        plan = plan_for(spec)
        if seen.error is not None:
            return error_checks(seen.error, plan)
        totals = increase(self._counters, seen.counters)
        # A series missing from this look (Prometheus marks a failed target's series stale) keeps its
        # last value: when it comes back, its increase is taken from there, not counted whole again.
        self._counters = {**(self._counters or {}), **seen.counters}
        state = self.state
        evidence = self._evidence(plan, state, now)
        looks = per_variant(totals, spec.variants, seen.counters)
        self.token_rates = self.token_rates.add(now, {v: look.generated for v, look in looks.items()})
        evidence = tests.add_look(evidence, plan, looks, stage_of(state))
        self.state = replace(state, evidence=evidence)
        return analyse(
            spec.analysis,
            plan,
            evidence,
            seen.weight_status.get(plan.candidate, ()),
            seen.effective_windows.get(plan.candidate, ()),
            shadowing=state.phase == Phase.SHADOW,
            mismatches=seen.mismatches.get(plan.candidate, ()),
        )

    def _evidence(self, plan: Plan, state: RolloutState, now: float) -> tests.Evidence:
        """The state's evidence, or new tests (logged, with why) where it has none for this plan."""
        current = state.evidence
        if current is not None and current.plan == plan.key:
            return current
        if current is not None:
            why = "the settings that define the tests (or the candidate) changed"
        elif state.history and state.history[-1].reason in ("operator retry", "operator resume"):
            why = state.history[-1].reason
        else:
            why = "no saved evidence for this rollout (a new rollout, or its state was lost)"
        self.tests_started = f"{why}; alpha {plan.alpha:.3%} per test over {list(plan.tests)}"
        log.warning("rollout %s: new sequential tests: %s", self.spec.name, self.tests_started)
        return tests.start(plan, stage_of(state), now)

    async def _capacity_look(self, spec: RolloutSpec) -> CapacityGate | None:
        if self.capacity is None:
            return None
        routing = self.gateway.live.routing
        gate = await asyncio.to_thread(self.capacity.look, spec, self.state, routing, self._clock())
        telemetry.record_capacity(spec.name, self.capacity.view or {})
        return gate

    def _provider_for(self, spec: RolloutSpec) -> MetricsProvider | None:
        """The provider for this spec's variants and source, rebuilt when those change; None (and the
        guard off, with the reason) when there is none or the spec names no baseline."""
        key = (tuple(spec.variants), spec.retries.fallback, spec.analysis.provider)
        if key != self._provider_key:
            self._provider_key = key
            try:
                roles(spec)
                self._provider, self.guard_off = self._make_provider(spec), None
            except (ProviderUnavailable, SpecError) as error:
                self._provider, self.guard_off = None, str(error)
                log.warning("rollout %s: the guard is off: %s", spec.name, error)
        return self._provider

    def _proxy_connected(self) -> bool:
        """Whether a proxy has connected since this controller started (see the module docstring)."""
        self._proxy_seen = self._proxy_seen or any(s.get("key") for s in self.proxies.streams())
        return self._proxy_seen

    def _step(
        self,
        spec: RolloutSpec,
        checks: list[Check] | None,
        command: Command | None,
        now: float,
        capacity: CapacityGate | None = None,
    ) -> str | None:
        """Step the machine and apply its actions but the save (the caller's: `_save`); returns why
        `command` was ignored (None: it was not)."""
        before = self.state
        state, actions = step(spec, before, checks, command, now, capacity)
        ignored = None
        for action in actions:
            if isinstance(action, Alert):
                self._alert(action.message, now)
            elif isinstance(action, RecordDecision):
                self._record(spec, action, now)
            elif isinstance(action, Ignored):
                ignored = action.reason
                log.info("rollout %s: %s ignored: %s", spec.name, action.command.value, action.reason)
        self.state = state
        if state.phase == Phase.ROLLED_BACK and before.phase != Phase.ROLLED_BACK:
            telemetry.ROLLBACKS.labels(spec.name, rollback_reason(checks, command)).inc()
        if state.label() != before.label():
            log.info("rollout %s: %s -> %s: %s", spec.name, before.label(), state.label(), state.reason)
        self._push(spec, state)
        for phase in Phase:
            telemetry.ROLLOUT_PHASE.labels(spec.name, phase.value).set(1 if phase == state.phase else 0)
        if state.rollback_started is not None and before.rollback_started != state.rollback_started:
            self._confirm_rollback_later()
        return ignored

    # -- persistence ------------------------------------------------------------------------------

    async def _save(self) -> None:
        """Save the state if the store does not hold it yet; off the event loop (a disk, the API server)."""
        state = self.state
        if state != self._stored:
            self._save_result(state, await asyncio.to_thread(self._call_store, self.store.save, state))

    @staticmethod
    def _call_store(save: Callable[[RolloutState], None], state: RolloutState) -> Exception | None:
        try:
            save(state)
        except Exception as error:  # whatever the store's failure, the controller carries on
            return error
        return None

    def _save_result(self, state: RolloutState, error: Exception | None) -> None:
        if error is None:
            self._stored = state
            if self.save_error is not None:
                log.info("rollout %s: state saved to %s again", self.spec.name, self.store.where)
            self.save_error = None
            return
        if self.save_error is None:  # one alert per run of failures; each retry is logged
            self._alert(f"rollout state not saved to {self.store.where}, retrying at every step: {error}")
        else:
            log.warning(
                "rollout %s: state still not saved to %s: %s", self.spec.name, self.store.where, error
            )
        self.save_error = f"{type(error).__name__}: {error}"

    def _push(self, spec: RolloutSpec, state: RolloutState) -> None:
        try:
            wanted = rollout_split(spec, state)
            if wanted != self.gateway.rollout:
                self.gateway.set_rollout_split(wanted)
        except SpecError as error:
            self._alert(
                f"cannot apply the rollout's split ({state.label()}), retrying next interval: {error}"
            )

    def _alert(self, message: str, now: float | None = None) -> None:
        log.warning("rollout %s: ALERT: %s", self.spec.name, message)
        telemetry.ALERTS.labels(self.spec.name).inc()
        self.alerts.append({"at": self._clock() if now is None else now, "message": message})

    def _record(self, spec: RolloutSpec, decision: RecordDecision, now: float) -> None:
        ran = {check.name for check in decision.checks}
        if self.last_decision is not None:
            telemetry.forget_checks(spec.name, {c["name"] for c in self.last_decision["checks"]} - ran)
        evidence = self.state.evidence
        telemetry.record_checks(spec.name, decision.checks, evidence.error_bounds if evidence else None)
        checks = [check_dict(c) for c in decision.checks]
        self.last_decision = {"at": now, "outcome": decision.outcome, "checks": checks}

    # -- rollback ACK -----------------------------------------------------------------------------

    def _confirm_rollback_later(self) -> None:
        if self._confirm is None or self._confirm.done():
            self._confirm = asyncio.get_running_loop().create_task(self._confirm_rollback())

    async def _confirm_rollback(self) -> None:
        """Until every connected proxy ACKed the rollback (or a retry made it moot); then until the
        proxies cut off from the control plane have come back and ACKed it too (gateway/rollout/fleet.py)."""
        while self.state.rollback_started is not None:
            acked = await self.proxies.wait_converged(self.ack_deadline)
            async with self._lock:
                now = self._clock()
                if acked:
                    state, seconds = rollback_acked(self.state, now)
                    if seconds is not None:
                        self._rollback_done(state, seconds)
                        await self._save()
                    break
                since = now - self.state.rollback_started if self.state.rollback_started else 0.0
                gone = self.proxies.disconnected()
                self._alert(ack_timeout_message(since, self.proxies.streams(), gone, now), now)
        rolled_back = lambda: self.state.phase == Phase.ROLLED_BACK  # noqa: E731
        await self.cut_off.await_return(
            self.proxies, self.ack_deadline, rolled_back, self._alert, self._clock()
        )

    def _rollback_done(self, state: RolloutState, seconds: float) -> None:
        self.state = state
        self.last_rollback_seconds = seconds
        telemetry.ROLLBACK_SECONDS.labels(self.spec.name).observe(seconds)
        proxies = len(self.proxies.streams())
        log.info("rollout %s: rollback ACKed by all %d proxies, %.3fs on", self.spec.name, proxies, seconds)

    # -- reading ----------------------------------------------------------------------------------
    def status(self) -> dict:
        return rollout_status(
            self.spec,
            self.state,
            self._clock(),
            guard_off=self.guard_off,
            last_rollback_seconds=self.last_rollback_seconds,
            last_decision=self.last_decision,
            alerts=list(self.alerts),
            tests_started=self.tests_started,
            store=self.store.where,
            save_error=self.save_error,
            rollback_pending=self.cut_off.pending,
            capacity=per_million_tokens(self.capacity.view, self.token_rates.per_second())
            if self.capacity
            else None,
        )
