"""Webhook receivers for the notification tests: one that records every request it is sent (real HTTP
on loopback, served in a thread), and one that blackholes them (a listening socket never accepted:
the kernel completes the handshake, nobody ever answers)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.threaded_server import served


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """Every request, in order; it answers `failing` to the first `fail_first` requests, `status` after."""

    status: int = 200
    fail_first: int = 0
    failing: int = 503
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            body = await request.body()
            with self._lock:
                self.received.append(Received(request.url.path, dict(request.headers), body))
                failed = len(self.received) <= self.fail_first
            return Response(status_code=self.failing if failed else self.status)

        return Starlette(routes=[Route("/{path:path}", hook, methods=["POST"])])

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)


@contextmanager
def recording(status: int = 200, fail_first: int = 0) -> Iterator[tuple[Recorder, int]]:
    recorder = Recorder(status, fail_first)
    with served(recorder.app(), "the webhook receiver") as port:
        yield recorder, port


@contextmanager
def blackhole() -> Iterator[int]:
    """A loopback port that takes connections and never answers; closed after the block."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]
    finally:
        listener.close()
