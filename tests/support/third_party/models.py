"""The third-party servers' virtual environments (`make third-party`) and the tiny model they serve.

The model is made here by make_tiny_model.py in the `transformers` venv, never downloaded, and kept
under .tools/third-party-models/ keyed by that script's hash: a test session makes it once (about 10 s),
under a lock so that xdist's workers wait for the first instead of making it each, later sessions on the
same checkout reuse it, and editing the script makes a new one.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import unavailable
from tests.support.shared import locked

REPO = Path(__file__).resolve().parents[3]
VENVS = REPO / ".tools" / "venvs"
MODELS = REPO / ".tools" / "third-party-models"
SCRIPT = Path(__file__).with_name("make_tiny_model.py")

# The name clients send as `model`: `transformers serve` answers only the name it was started with
# (the directory's), so llama.cpp and vLLM are started with it as their alias too, as in a real gray
# release of one model name across two servers.
MODEL_NAME = "tiny-llama"


def venv_bin(venv: str, program: str, provided_by: str = "make third-party") -> Path:
    """`program` in `.tools/venvs/<venv>/bin`; `unavailable` (skip, or fail under CI) when not installed."""
    path = VENVS / venv / "bin" / program
    if not path.exists():
        unavailable(f"{path.relative_to(REPO)} is not installed; `{provided_by}` installs it")
    return path


@dataclass(frozen=True)
class TinyModel:
    """A Llama of 0.4 M parameters: a save_pretrained directory named MODEL_NAME, and its GGUF."""

    directory: Path

    @property
    def hf(self) -> Path:
        return self.directory / MODEL_NAME

    @property
    def gguf(self) -> Path:
        return self.directory / f"{MODEL_NAME}.gguf"


def tiny_model(cache: Path = MODELS, perturbed: float = 0.0) -> TinyModel:
    """The cached model for the current make_tiny_model.py, made first if absent; `perturbed`: the same
    model with its weights perturbed by that much noise (make_tiny_model.py's SCALE)."""
    key = hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:16] + (
        f"-perturbed-{perturbed:g}" if perturbed else ""
    )
    model = TinyModel(cache / key)
    if model.gguf.exists():
        return model
    with locked(cache / f".{key}.lock"):  # xdist's workers, or sessions side by side: one makes it
        if not model.gguf.exists():
            make(model, cache, perturbed)
    return model


def make(model: TinyModel, cache: Path, perturbed: float) -> None:
    """make_tiny_model.py into a scratch directory of `cache`, then renamed to `model`'s."""
    python = venv_bin("transformers", "python")
    cache.mkdir(parents=True, exist_ok=True)
    scratch = TinyModel(Path(tempfile.mkdtemp(dir=cache, prefix=".making-")))
    try:
        made = subprocess.run(
            [
                str(python),
                str(SCRIPT),
                str(scratch.hf),
                str(scratch.gguf),
                *([f"{perturbed:g}"] if perturbed else []),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if made.returncode != 0:
            raise RuntimeError(f"{SCRIPT.name} failed ({made.returncode}):\n{made.stderr[-3000:]}")
        if not model.gguf.exists():  # a session without the lock may have made it: same script, same model
            scratch.directory.replace(model.directory)
    finally:
        shutil.rmtree(scratch.directory, ignore_errors=True)
