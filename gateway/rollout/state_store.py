"""Where the rollout state lives between runs, so a restarted (or newly elected) controller resumes where
the last one stopped: the `StateStore` protocol the controller is given, its JSON text format, and the
file store (local mode; Kubernetes mode's ConfigMap store is gateway/kubernetes/state.py, same text).

File writes are atomic (a temporary file in the same directory, fsynced, then os.replace): a crash
mid-write leaves the previous state, never half of one. A missing file means no rollout ran yet (None).
A file that cannot be read back as a state is logged, moved aside to `<name>.corrupt` for inspection,
and reported as None: the controller then starts the rollout from its first stage (weight 0 or shadow),
the safe direction, instead of crash-looping on the same bad file at every start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gateway.rollout.rollout_state import RolloutState
from gateway.rollout.state_format1 import upgraded

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: each check's tests in a record of its own (1: one evidence record, still read)


class StateStore(Protocol):
    """What the controller persists through. Both calls may block (disk, network): the controller runs
    `save` off the event loop. `save` raises on failure; the controller keeps the state and retries."""

    where: str  # for status and messages: a path, or `configmap/<namespace>/<name>`

    def load(self) -> RolloutState | None: ...

    def save(self, state: RolloutState) -> None: ...


def encode_state(state: RolloutState) -> str:
    """The stored text: {"version": 2, "state": {...}}, the same in a file and in a ConfigMap."""
    return json.dumps({"version": FORMAT_VERSION, "state": state.to_dict()}, indent=2, sort_keys=True) + "\n"


def decode_state(text: str) -> RolloutState:
    """ValueError (with the reason) unless `text` is a state `encode_state` wrote, in this format or
    format 1 (gateway/rollout/state_format1.py)."""
    try:
        data = json.loads(text)
        version = data.get("version")
        if version == 1:
            return RolloutState.from_dict(upgraded(data["state"]))
        if version != FORMAT_VERSION:
            raise ValueError(f"format version {version!r}, expected {FORMAT_VERSION} (or 1)")
        return RolloutState.from_dict(data["state"])
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a rollout state: {error!r}") from None


def save_state(path: Path, state: RolloutState) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(encode_state(state))
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def load_state(path: Path) -> RolloutState | None:
    """The saved state; None if there is none, or (with a warning, the file moved aside) if it is corrupt."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return decode_state(text)
    except ValueError as error:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
            moved_to = str(aside)
        except OSError as move_error:  # a read-only directory: still start, and say so
            moved_to = f"nowhere ({move_error})"
        log.warning(
            "rollout state %s is unreadable (%s); moved to %s, starting afresh", path, error, moved_to
        )
        return None


class FileStateStore:
    """The state in one JSON file (`--state-file`, default `SPEC.state.json`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def load(self) -> RolloutState | None:
        return load_state(self.path)

    def save(self, state: RolloutState) -> None:
        save_state(self.path, state)


class SavedState:
    """The controller's side of its store: the state the store holds, as far as it knows, and the last
    save's failure until a save succeeds. A save that fails (disk full, API server unreachable) raises
    nothing: the first failure of a run alerts, later ones are logged, and every later save tries again."""

    def __init__(self, store: StateStore, name: Callable[[], str], alert: Callable[[str], None]) -> None:
        self.store = store
        self._name = name  # the rollout's, for the logs
        self._alert = alert
        self.stored: RolloutState | None = None
        self.error: str | None = None

    def save_now(self, state: RolloutState) -> None:
        """Save on the caller's thread (at start: there is no event loop to keep free yet)."""
        if state != self.stored:
            self._result(state, _call(self.store.save, state))

    async def save(self, state: RolloutState) -> None:
        """Save off the event loop (a disk, the API server), unless the store holds `state` already."""
        if state != self.stored:
            self._result(state, await asyncio.to_thread(_call, self.store.save, state))

    def _result(self, state: RolloutState, error: Exception | None) -> None:
        where = self.store.where
        if error is None:
            self.stored = state
            if self.error is not None:
                log.info("rollout %s: state saved to %s again", self._name(), where)
            self.error = None
            return
        if self.error is None:  # one alert per run of failures; each retry is logged
            self._alert(f"rollout state not saved to {where}, retrying at every step: {error}")
        else:
            log.warning("rollout %s: state still not saved to %s: %s", self._name(), where, error)
        self.error = f"{type(error).__name__}: {error}"


def _call(save: Callable[[RolloutState], None], state: RolloutState) -> Exception | None:
    try:
        save(state)
    except Exception as error:  # whatever the store's failure, the controller carries on
        return error
    return None
