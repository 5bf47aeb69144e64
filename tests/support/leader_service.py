"""A stand-in for the chart's leader-only Service (`<release>-graystack-gateway-admin`) and kube-proxy in
front of it: each new TCP connection goes to a pod that carries the leader label now, read from the API
double, trying the labelled pods in name order and skipping one that refuses (in a cluster a dead pod is
not ready, so the Service leaves it out). A connection stays with the pod it reached, as through a
ClusterIP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping


class LeaderService:
    def __init__(self, leaders: Callable[[], list[str]], ports: Mapping[str, int]) -> None:
        self._leaders = leaders  # the labelled pods' names
        self._ports = ports  # pod name -> its gateway's xDS port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for pod in await asyncio.to_thread(self._leaders):
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(
                    "127.0.0.1", self._ports[pod]
                )
            except OSError:
                continue
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
            return
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()
