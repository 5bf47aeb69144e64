"""Where a rollback stands on the fleet of proxies: ACKed by the connected ones, pending on the others.

A proxy cut off from the control plane (a partition, a node gone quiet) keeps routing by the last
configuration it ACKed: during a rollback, that is the candidate's weight. Envoy has no feature that
expires routes while their control plane is away, so nothing here can bound it; what the controller
can do is say so, by proxy and for how long, and count the rollback done everywhere only once every
such proxy has come back and ACKed (or has been forgotten: gone longer than the gateway's
--forget-proxies-after, as a pod scaled away is).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from gateway.rollout.rollout_state import Phase, RolloutState
from gateway.xds.status import DisconnectedProxy

log = logging.getLogger(__name__)


class Disconnected(Protocol):
    """A proxy whose ADS stream ended (gateway.xds.server.Disconnected)."""

    node: str
    last_heard_at: float
    disconnected_at: float

    def describe(self) -> DisconnectedProxy: ...


class Stream(Protocol):
    """A connected proxy as the ADS server describes it (gateway.xds.status.ProxyStatus)."""

    @property
    def node(self) -> str | None: ...

    @property
    def key(self) -> str | None: ...  # None until the proxy named its node

    @property
    def converged(self) -> bool: ...


class Proxies(Protocol):
    """What the controller asks of the xDS server (gateway.xds.server.AdsServer)."""

    async def wait_converged(self, seconds: float, everywhere: bool = False) -> bool: ...

    def streams(self) -> Sequence[Stream]: ...

    def disconnected(self) -> Sequence[Disconnected]: ...


class Alerting(Protocol):
    """The controller's alert: logged, counted, shown in status, at `now` (None: the clock's)."""

    def __call__(self, message: str, now: float | None = None) -> None: ...


def cut_off(gone: Sequence[Disconnected], now: float) -> str:
    """`envoy-3 (disconnected 12.0s ago, last heard 16.1s ago), ...`"""
    return ", ".join(
        f"{proxy.node} (disconnected {now - proxy.disconnected_at:.1f}s ago, "
        f"last heard {now - proxy.last_heard_at:.1f}s ago)"
        for proxy in gone
    )


def pending_message(connected: int, gone: Sequence[Disconnected], now: float) -> str:
    return (
        f"rollback ACKed by the {connected} connected proxies, pending on {len(gone)} cut off from the "
        f"control plane: {cut_off(gone, now)}; until they reconnect they route by their last split"
    )


def ack_timeout_message(
    since: float, streams: Sequence[Stream], gone: Sequence[Disconnected], now: float
) -> str:
    """The rollback is not live everywhere by the deadline: which proxies have it, which do not."""
    converged = sum(1 for stream in streams if stream.converged)
    waiting = [str(stream.node) for stream in streams if not stream.converged]
    message = f"rollback not ACKed by every proxy after {since:.1f}s: {converged} of {len(streams)} connected have weight 0 live"
    if waiting:
        message += f"; not yet ACKed by {', '.join(waiting)}"
    if gone:
        message += f"; cut off: {cut_off(gone, now)}"
    return message


class CutOff:
    """The proxies a rollback is pending on: cut off before they ACKed it (shown in status)."""

    def __init__(self) -> None:
        self.pending: list[DisconnectedProxy] = []

    async def await_return(
        self,
        proxies: Proxies,
        deadline: float,
        still_wanted: Callable[[], bool],
        alert: Callable[[str], None],
        now: float,
    ) -> list[str]:
        """Once the connected proxies ACKed: alert on those cut off, and wait (`deadline` at a time) until
        they are back and ACKed, forgotten, or `still_wanted()` is false (a retry made it moot); returns
        the proxies it waited on."""
        gone = proxies.disconnected()
        if not gone:
            return []
        alert(pending_message(len(proxies.streams()), gone, now))
        while gone and still_wanted():
            self.pending = [proxy.describe() for proxy in gone]
            if await proxies.wait_converged(deadline, everywhere=True):
                break
            gone = proxies.disconnected()
        waited = [proxy.node for proxy in self.pending]
        if waited:
            log.info(
                "the proxies cut off (%s) are back or forgotten: the rollback is live everywhere",
                ", ".join(waited),
            )
        self.pending = []
        return waited


class RollbackConfirmation:
    """A rollback on its way to the fleet (status shows how long the last one took, and whom it is
    pending on): after the push, a task waits for every connected proxy's ACK (`deadline` at a time,
    alerting past each one with the proxies that have not ACKed) and then calls `acked(now)` under the
    lock; then it waits for the proxies cut off from the control plane (`CutOff`). `state()` is the
    rollout's state as it stands: a retry makes the wait moot."""

    def __init__(
        self,
        proxies: Proxies,
        state: Callable[[], RolloutState],
        acked: Callable[[float], Awaitable[None]],
        lock: asyncio.Lock,
        clock: Callable[[], float],
        alert: Alerting,
        confirmed_late: Callable[[list[str]], None],
    ) -> None:
        """`confirmed_late`: told the proxies that ACKed only once they came back (notifications)."""
        self.proxies = proxies
        self._state = state
        self._acked = acked
        self._lock = lock
        self._clock = clock
        self._alert = alert
        self.cut_off = CutOff()
        self.last_seconds: float | None = None  # graystack_rollback_seconds of the last one ACKed
        self._confirmed_late = confirmed_late
        self.task: asyncio.Task[None] | None = None

    def start(self, deadline: float) -> None:
        """Confirm the rollback in flight, unless a task does already."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._confirm(deadline))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _confirm(self, deadline: float) -> None:
        """Until every connected proxy ACKed the rollback (or a retry made it moot); then until the
        proxies cut off from the control plane have come back and ACKed it too."""
        while self._state().rollback_started is not None:
            converged = await self.proxies.wait_converged(deadline)
            async with self._lock:
                now = self._clock()
                if converged:
                    await self._acked(now)
                    break
                started = self._state().rollback_started
                since = now - started if started else 0.0
                gone = self.proxies.disconnected()
                self._alert(ack_timeout_message(since, self.proxies.streams(), gone, now), now)
        rolled_back = lambda: self._state().phase == Phase.ROLLED_BACK  # noqa: E731
        waited = await self.cut_off.await_return(
            self.proxies, deadline, rolled_back, self._alert, self._clock()
        )
        if waited:
            self._confirmed_late(waited)
