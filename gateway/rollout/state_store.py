"""Persist the rollout state to a JSON file, so a restarted controller resumes where it stopped.

Writes are atomic (a temporary file in the same directory, fsynced, then os.replace): a crash mid-write
leaves the previous state, never half of one. A missing file means no rollout ran yet (None). A file
that cannot be read back as a state is logged, moved aside to `<name>.corrupt` for inspection, and
reported as None: the controller then starts the rollout from its first stage (weight 0 or shadow),
the safe direction, instead of crash-looping on the same bad file at every start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from gateway.rollout.machine import RolloutState

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def save_state(path: Path, state: RolloutState) -> None:
    text = json.dumps({"version": FORMAT_VERSION, "state": state.to_dict()}, indent=2, sort_keys=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text + "\n")
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
        data = json.loads(text)
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"format version {data.get('version')!r}, expected {FORMAT_VERSION}")
        return RolloutState.from_dict(data["state"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except OSError as move_error:  # a read-only directory: still start, and say so
            aside = f"nowhere ({move_error})"
        log.warning("rollout state %s is unreadable (%s); moved to %s, starting afresh", path, error, aside)
        return None
