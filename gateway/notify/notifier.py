"""The notifications of one gateway process: the controller's facts and the spec's refusals in,
one message per event out to each receiver that wants it (gateway/notify/delivery.py sends them).

Receivers follow the spec file's spec: an edit that changes `notifications` replaces the outboxes
(an unchanged receiver keeps its queue and counts). Everything here runs on the caller's turn of the
event loop and returns at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.notify import events
from gateway.notify.delivery import DELIVERY, Delivery, Outbox
from gateway.notify.status import NotificationsStatus
from gateway.rollout.facts import Fact
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.notifications import Notifications

log = logging.getLogger(__name__)


class Notifier:
    def __init__(
        self,
        spec: Callable[[], RolloutSpec],
        delivery: Delivery = DELIVERY,
        clock: Callable[[], float] = time.time,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """`spec()`: the last good spec (the Gateway's `spec`), whose `notifications` name the receivers;
        `leading()`: whether this replica tells (a follower mirrors the leader's state: it would tell
        every step twice)."""
        self._spec = spec
        self._leading = leading
        self._delivery = delivery
        self._clock = clock
        self._memory = events.Memory()
        self._settings: Notifications | None = None
        self.outboxes: list[Outbox] = []

    def on_fact(self, fact: Fact) -> None:
        """A watcher of the rollout controller (gateway/rollout/facts.py)."""
        if not self._leading():
            return
        notifications = self._current(fact.spec)
        told, self._memory = events.derive(fact, self._memory, notifications.inconclusive_after)
        for event in told:
            self._send(event)

    def on_refused(self, message: str) -> None:
        """A watcher of the Gateway's refusals: told with the last good spec's receivers."""
        if not self._leading():
            return
        try:
            spec = self._spec()
        except SpecError:  # the first spec was refused: there are no receivers yet
            return
        self._current(spec)
        self._send(events.spec_refused(spec.name, message, self._clock()))

    def start(self) -> None:
        for outbox in self.outboxes:
            outbox.start()

    async def stop(self) -> None:
        for outbox in self.outboxes:
            await outbox.stop()

    def status(self) -> NotificationsStatus | None:
        """None where the spec names no receiver (and none was ever named)."""
        if not self.outboxes:
            return None
        return NotificationsStatus(receivers=[outbox.status() for outbox in self.outboxes])

    def _send(self, event: events.Event) -> None:
        for outbox in self.outboxes:
            if outbox.receiver.wants(event.kind):
                outbox.put(event)
        log.info("notification %s: %s", event.kind, event.text)

    def _current(self, spec: RolloutSpec) -> Notifications:
        """The spec's settings, the outboxes rebuilt where its receivers changed."""
        settings = spec.notifications
        if settings == self._settings:
            return settings
        same_link = self._settings is not None and self._settings.dashboard_url == settings.dashboard_url
        kept = {(o.receiver, o.name): o for o in self.outboxes} if same_link else {}
        names = _names([receiver.host for receiver in settings.receivers])
        outboxes = [
            kept.get((receiver, name))
            or Outbox(receiver, name, settings.dashboard_url, self._delivery, self._clock)
            for receiver, name in zip(settings.receivers, names, strict=True)
        ]
        for gone in self.outboxes:
            if gone not in outboxes:
                gone.cancel()
        for outbox in outboxes:
            outbox.start()  # ready before its first message: a rollback's waits on nothing
        self.outboxes, self._settings = outboxes, settings
        return settings


def _names(hosts: list[str]) -> list[str]:
    """Each receiver's name in status and metrics: its host, `host#2` for a second on the same host."""
    seen: dict[str, int] = {}
    names = []
    for host in hosts:
        seen[host] = seen.get(host, 0) + 1
        names.append(host if seen[host] == 1 else f"{host}#{seen[host]}")
    return names
