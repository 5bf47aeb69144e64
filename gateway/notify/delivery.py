"""Sending one receiver's notifications: the only I/O of gateway/notify/.

The controller only ever calls `Outbox.put`, which never waits: a bounded queue, and when it is full
(a receiver down or slow for long) the oldest message is dropped and counted, so the newest news (a
rollback) gets through once the receiver is back. A task per receiver sends them in order, each with a
per-attempt timeout and retries after 1 s, 2 s, 4 s... (`Delivery`); a message that fails every attempt
is counted and shown in status, and the next one is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gateway.notify import messages, telemetry
from gateway.notify.events import Event
from gateway.notify.status import ReceiverStatus
from gateway.spec.notifications import Receiver, read_secret

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """How hard to try: the queue's bound, attempts per message, each one's timeout, the first backoff."""

    queue: int = 100
    attempts: int = 4
    timeout: float = 5.0
    backoff: float = 1.0


DELIVERY = Delivery()


class Outbox:
    """One receiver's queue and its sender task (started by `start`, on the event loop)."""

    def __init__(
        self,
        receiver: Receiver,
        name: str,
        dashboard_url: str | None,
        delivery: Delivery = DELIVERY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.receiver = receiver
        self.name = name  # its host: never the URL, whose path may hold a token
        self._dashboard_url = dashboard_url
        self._delivery = delivery
        self._clock = clock
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=delivery.queue)
        self._task: asyncio.Task[None] | None = None
        self.counts = {"delivered": 0, "failed": 0, "dropped": 0}
        self.last_error: str | None = None
        self.last_error_at: float | None = None

    def put(self, event: Event) -> None:
        """Queue `event`; never waits (the oldest waiting message makes room, counted as dropped)."""
        if self._queue.full():
            dropped = self._queue.get_nowait()
            self._count(dropped, "dropped")
            telemetry.QUEUE_DROPPED.labels(self.name).inc()
        self._queue.put_nowait(event)
        telemetry.QUEUE_DEPTH.labels(self.name).set(self._queue.qsize())
        self.start()

    def start(self) -> None:
        """Start the sender, where an event loop runs (made at restore, before it, the next put starts it)."""
        if self._task is not None and not self._task.done():
            return
        with contextlib.suppress(RuntimeError):
            self._task = asyncio.get_running_loop().create_task(self._send_all())

    def cancel(self) -> None:
        """Stop sending (a receiver the spec no longer names); what is queued is not sent."""
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        self.cancel()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def status(self) -> ReceiverStatus:
        return ReceiverStatus(
            receiver=self.name,
            format=self.receiver.format,
            pending=self._queue.qsize(),
            last_error=self.last_error,
            last_error_at=self.last_error_at,
            **self.counts,
        )

    async def _send_all(self) -> None:
        # Built off the loop: a client loads its TLS trust store, tens of milliseconds of CPU that would
        # otherwise land on the look (and the rollback's push) that queued the first message.
        client = await asyncio.to_thread(httpx.AsyncClient, timeout=self._delivery.timeout)
        async with client:
            while True:
                event = await self._queue.get()
                telemetry.QUEUE_DEPTH.labels(self.name).set(self._queue.qsize())
                delivered = await self._send(client, event)
                self._count(event, "delivered" if delivered else "failed")

    async def _send(self, client: httpx.AsyncClient, event: Event) -> bool:
        """Every attempt at one message, with backoff between them; True once one is answered 2xx."""
        payload = messages.body(event, self.receiver.format, self._dashboard_url)
        for attempt in range(self._delivery.attempts):
            if attempt:
                await asyncio.sleep(self._delivery.backoff * 2 ** (attempt - 1))
            try:
                secret = read_secret(self.receiver)
            except (OSError, KeyError):
                self._failed(event, "its signing secret cannot be read")
                continue
            sent = messages.headers(event, secret, int(self._clock()), payload)
            try:
                answer = await client.post(self.receiver.url, content=payload, headers=sent)
            except httpx.HTTPError as error:
                self._failed(event, f"{type(error).__name__}")  # not str(error): it may quote the URL
                continue
            if answer.is_success:
                return True
            self._failed(event, f"answered {answer.status_code}")
        return False

    def _failed(self, event: Event, why: str) -> None:
        self.last_error, self.last_error_at = f"{event.kind}: {why}", self._clock()
        log.warning("notification %s to %s failed: %s", event.kind, self.name, why)

    def _count(self, event: Event, outcome: str) -> None:
        self.counts[outcome] += 1
        telemetry.NOTIFICATIONS.labels(self.name, event.kind, outcome).inc()
