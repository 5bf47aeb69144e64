"""List + watch, the way client-go's reflector keeps a cache in step with the API server.

It lists the objects (remembering the list's resourceVersion), then watches from that version. A watch
that ends (the server's timeout, a dropped connection) is reopened from the last version seen, with a
growing backoff while reconnecting keeps failing. When the server answers 410 Gone (that version was
compacted away, as etcd does after a few minutes), resuming is impossible: it lists again. Every
`resync` seconds it lists anyway, so an event lost anywhere is repaired. After each change the whole
set (name -> object, the JSON the server sent) goes to `on_change`, on the reflector's own thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch

from gateway.kubernetes.api import REQUEST_TIMEOUT, call_json, status_of

log = logging.getLogger(__name__)

GONE = 410


class Reflector:
    def __init__(
        self,
        what: str,
        list_call: Callable[..., Any],
        resync: float = 300.0,
        watch_timeout: int = 60,
        backoff: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        """`list_call`: a generated list method with its arguments bound (functools.partial), e.g. the
        namespace and a selector; the reflector adds the watch arguments itself. It lists when asked
        (`list_now`); it watches, and calls `on_change` with each new set of objects, once started."""
        self.what = what
        self._list_call = list_call
        self._on_change: Callable[[dict[str, dict[str, Any]]], None] = lambda objects: None
        self._resync = resync
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._objects: dict[str, dict[str, Any]] = {}
        self._version: str | None = None
        self._listed_at = 0.0
        self._stopping = threading.Event()
        self._watch: watch.Watch | None = None
        self._response = None  # the open watch's HTTP response, shut down by stop()
        self._thread: threading.Thread | None = None

    @property
    def objects(self) -> dict[str, dict[str, Any]]:
        return dict(self._objects)

    def list_now(self) -> dict[str, dict[str, Any]]:
        """List (raises on failure: a gateway that cannot read its sources at start should say so)."""
        answer = call_json(self._list_call)
        self._objects = {item["metadata"]["name"]: item for item in answer.get("items") or []}
        self._version = answer["metadata"]["resourceVersion"]
        self._listed_at = time.monotonic()
        return self.objects

    def start(self, on_change: Callable[[dict[str, dict[str, Any]]], None]) -> None:
        self._on_change = on_change
        self._thread = threading.Thread(target=self._run, name=f"reflector {self.what}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._watch is not None:
            self._watch.stop()
        if self._response is not None:
            with contextlib.suppress(ValueError, RuntimeError):  # that watch has ended: nothing blocks
                self._response.shutdown()  # a read blocked on the open watch returns now, not at its timeout
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stopping.is_set():
            try:
                if self._version is None or time.monotonic() - self._listed_at >= self._resync:
                    before = self._objects
                    if self.list_now() != before:
                        self._on_change(self.objects)
                self._watch_once()
                delay = self._backoff[0]
            except Exception as error:
                if status_of(error) == GONE:
                    log.info("%s: watch expired (410 Gone), listing again", self.what)
                    self._version = None
                    continue
                if self._stopping.is_set():
                    return
                log.warning("%s: list/watch failed, retrying in %.1fs: %s", self.what, delay, error)
                self._stopping.wait(delay)
                delay = min(delay * 2, self._backoff[1])

    def _watch_once(self) -> None:
        remaining = self._resync - (time.monotonic() - self._listed_at)
        timeout = max(1, min(self._watch_timeout, int(remaining)))
        self._watch = watch.Watch()
        stream = self._watch.stream(
            self._watching,
            resource_version=self._version,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            _request_timeout=(REQUEST_TIMEOUT[0], timeout + REQUEST_TIMEOUT[1]),
        )
        for event in stream:
            if self._stopping.is_set():
                break
            if event is not None:
                self._apply(event["type"], event["raw_object"])

    def _watching(self, *args: Any, **kwargs: Any) -> Any:
        """The list call the watch makes, its response kept so that stop() can shut it down."""
        self._response = self._list_call(*args, **kwargs)
        return self._response

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        self._version = obj["metadata"].get("resourceVersion", self._version)
        name = obj["metadata"].get("name")
        if kind in ("ADDED", "MODIFIED"):
            self._objects = {**self._objects, name: obj}
        elif kind == "DELETED":
            self._objects = {key: value for key, value in self._objects.items() if key != name}
        else:  # BOOKMARK: only the version moves
            return
        self._on_change(self.objects)
