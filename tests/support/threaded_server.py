"""An ASGI app served by uvicorn in a thread on a free loopback port: real HTTP for Envoy, a probe or a
client to reach, inside the test's own process (so the test can read the app's state)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from graystack.local.processes import free_port


@contextmanager
def served(app: ASGIApp, what: str, log_level: str = "warning") -> Iterator[int]:
    """The app's port while the block runs; the server is stopped and its thread joined after it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"{what} did not start")
            threading.Event().wait(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
