"""Machine-wide claims on loopback ports picked but not yet bound.

`free_port` hands out a port nothing holds now, but the process it is for binds it later (a stack picks
all its ports, then starts its processes). Another process picking in between sees the same port free,
and the second of the two to bind fails: pytest-xdist's workers each start stacks (a `make test` run saw a gateway
exit `Failed to bind to address`), as would two `graystack up`s. So a pick is claimed in one small file
under the temporary directory, read and written under an exclusive lock, and a port claimed by anyone
in the last `CLAIM_S` seconds is not handed out again; by then it is bound, or abandoned."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

CLAIM_S = 300.0  # a stack's processes bind within seconds of its picks; a model server's load is the longest


def claims_path() -> Path:
    """The claims of this user's processes (one file a user: another's would not be writable)."""
    return Path(tempfile.gettempdir()) / f"graystack-ports-{os.getuid()}.json"


def claim(port: int, path: Path | None = None, now: float | None = None) -> bool:
    """Claim `port` for the caller: False if a live claim of any process holds it. A claims file that
    cannot be opened or read claims nothing and refuses nothing: the pick is then as good as the check
    that the port is unbound, which is all it was before claims."""
    path = path or claims_path()
    now = time.time() if now is None else now
    try:
        with path.open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            claims = live(handle.read(), now)
            if str(port) in claims:
                return False
            claims[str(port)] = now
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(claims))
    except OSError:
        return True
    return True


def live(text: str, now: float) -> dict[str, float]:
    """The claims in `text` made within CLAIM_S seconds of `now` (either side: a clock set back must not
    hold a port for good); none from a file a crash left half-written."""
    try:
        claims = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(claims, dict):
        return {}
    return {
        port: at for port, at in claims.items() if isinstance(at, int | float) and abs(now - at) < CLAIM_S
    }
