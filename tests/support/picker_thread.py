"""graystack's Endpoint Picker served from a thread of the test process, so that a test holds the picker
itself: it flips what the picker is fed, reads its counts and outcomes, and stops it (the picker down)
while Envoy runs. `graystack epp` serves the same servers (gateway/epp/server.py) from its main thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

import grpc

from gateway.epp import rewrite
from gateway.epp.picker import Picker
from gateway.epp.server import EppServer, start


class PickerThread:
    def __init__(
        self,
        picker: Picker,
        tls: grpc.ServerCredentials | None = None,
        fallbacks: int = 0,
        bound: int = rewrite.BOUND,
        test_headers: bool = False,
    ) -> None:
        self.picker = picker
        self._tls, self._fallbacks, self._bound = tls, fallbacks, bound
        self._test_headers = test_headers
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="epp", daemon=True)
        self._server: EppServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.port

    @property
    def unchanged(self) -> dict[str, int]:
        """The model variants' requests sent unchanged, by reason (gateway/epp/service.py)."""
        assert self._server is not None, "not started"
        return dict(self._server.service.unchanged)

    @property
    def unread(self) -> dict[str, int]:
        """The requests picked without the body a scorer wanted, by reason (gateway/epp/service.py)."""
        assert self._server is not None, "not started"
        return dict(self._server.service.unread)

    @property
    def health_port(self) -> int:
        assert self._server is not None, "not started"
        assert self._server.health_port is not None, "started without health"
        return self._server.health_port

    def start(self) -> PickerThread:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            start(
                self.picker, "127.0.0.1", 0, 0, self._tls, self._fallbacks, bound=self._bound,
                test_headers=self._test_headers,
            ),
            self._loop,
        )  # fmt: skip
        self._server = started.result(timeout=10)
        return self

    def submit(self, work: Coroutine[Any, Any, None]) -> Future[None]:
        """Run `work` on the picker's loop, beside it (the metrics reader, as the gateway runs it)."""
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(timeout=10)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        self._loop.close()
