"""The rollout spec as a file the gateway watches (local mode, or a mounted ConfigMap).

Polling the content hash, not inotify: a Kubernetes ConfigMap update swaps a symlink, which a
file watch on the old inode never sees.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from gateway.spec.model import RolloutSpec, SpecError, parse_spec

log = logging.getLogger(__name__)


def _read(path: Path) -> tuple[bytes | None, str]:
    """The file's bytes and a fingerprint of what was read (or of why it could not be)."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        return None, f"cannot read: {error.strerror or error}"
    return raw, hashlib.sha256(raw).hexdigest()


def _decode(path: Path, raw: bytes | None, fingerprint: str) -> RolloutSpec:
    if raw is None:
        raise SpecError(f"{path}: {fingerprint}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    return parse_spec(text, source=str(path))


def read_spec(path: Path) -> tuple[RolloutSpec, str]:
    """The spec at `path` and the hash of its bytes; SpecError if it is unreadable or invalid."""
    raw, fingerprint = _read(path)
    return _decode(path, raw, fingerprint), fingerprint


class SpecFileWatcher:
    """Calls `on_spec` with each new valid spec, `on_error` with each refused edit."""

    def __init__(
        self,
        path: Path,
        on_spec: Callable[[RolloutSpec, str], None],
        on_error: Callable[[SpecError], None],
        last_hash: str | None = None,
        interval: float = 0.25,
    ) -> None:
        self.path = path
        self._on_spec = on_spec
        self._on_error = on_error
        self._last_hash = last_hash
        self._interval = interval

    def poll(self) -> None:
        raw, fingerprint = _read(self.path)
        if fingerprint == self._last_hash:
            return
        self._last_hash = fingerprint
        try:
            spec = _decode(self.path, raw, fingerprint)
        except SpecError as error:
            log.error("spec refused, the last good one stays live: %s", error)
            self._on_error(error)
            return
        self._on_spec(spec, fingerprint)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.poll()
