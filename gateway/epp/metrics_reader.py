"""The I/O edge that reads every pod's Prometheus metrics in the background, all at once every `interval`,
each read cut off at `timeout`, into the picker's Readings (gateway/epp/readings.py). It runs beside the
picker on the same event loop and a pick never awaits it: a pod whose metrics hang only goes stale."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from gateway.epp.readings import Readings, parse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scrape:
    """Where a pod's metrics are (`path` on `port`; None: the endpoint's own port) and how often."""

    path: str = "/metrics"
    port: int | None = None
    interval: float = 1.0
    timeout: float = 0.5

    def url(self, endpoint: str) -> str:
        host, _, port = endpoint.rpartition(":")
        return f"http://{host}:{self.port or port}{self.path}"


class MetricsReader:
    """`endpoints`: the pool's endpoints now; `scrape`: how; both asked afresh each round, so a new pod or
    a spec change reaches the next one."""

    def __init__(
        self,
        readings: Readings,
        endpoints: Callable[[], Iterable[str]],
        scrape: Callable[[], Scrape] = Scrape,
        clock: Callable[[], float] = time.monotonic,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.readings, self._endpoints, self._scrape, self._clock = readings, endpoints, scrape, clock
        self._client = client or httpx.AsyncClient()

    async def read_once(self) -> None:
        """One round: every endpoint at once; the round lasts at most the timeout."""
        endpoints = sorted(set(self._endpoints()))
        self.readings.forget(endpoints)
        scrape = self._scrape()
        self.readings.interval = scrape.interval
        await asyncio.gather(*(self._read(endpoint, scrape) for endpoint in endpoints))

    async def _read(self, endpoint: str, scrape: Scrape) -> None:
        try:
            async with asyncio.timeout(scrape.timeout):
                answer = await self._client.get(scrape.url(endpoint), timeout=scrape.timeout)
            answer.raise_for_status()
            reading = parse(answer.text)
        except (TimeoutError, httpx.HTTPError, ValueError) as error:
            reason = f"{type(error).__name__}: {error}".rstrip(": ")
            if self.readings.failed(endpoint, reason, self._clock()):
                log.warning(
                    "%s: its metrics could not be read (%s); scored by in-flight counts", endpoint, reason
                )
            return
        self.readings.record(endpoint, reading, self._clock())

    async def run(self) -> None:
        """A round every `interval` seconds, until cancelled."""
        try:
            while True:
                started = self._clock()
                await self.read_once()
                await asyncio.sleep(max(0.0, self.readings.interval - (self._clock() - started)))
        finally:
            await self._client.aclose()
