"""Real `graystack serve` processes on free loopback ports, for integration tests (stopped by PID)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from click.testing import CliRunner

from graystack.cli import main
from graystack.local import loopback
from graystack.local.processes import ManagedProcess, free_port, start_process


def graystack(*args: str) -> str:
    """Run a `graystack` command in process (the same code as the console script); its output."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def variant_weights(
    directory: Path, seed: int = 1, erased: tuple[str, ...] = ("zero-layer",)
) -> dict[str, Path]:
    """A checkpoint per variant from one seed (one backbone), made by the CLI; `erased` ones erased."""
    paths = {variant: directory / f"{variant}.safetensors" for variant in ("baseline", "zero-layer")}
    for variant, path in paths.items():
        graystack("weights", "init", "--variant", variant, "--out", str(path), "--seed", str(seed))
    for variant in erased:
        graystack("weights", "erase", str(paths[variant]))
    return paths


@dataclass
class ModelServer:
    process: ManagedProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_model_server(
    name: str, variant: str, weights: Path, logs: Path, *flags: str, port: int | None = None
) -> ModelServer:
    """On `port` (a free one by default: a restart passes the one it had)."""
    port = port or free_port()
    argv = [sys.executable, "-m", "graystack", "serve", "--variant", variant, "--weights", str(weights)]
    process = start_process(name, [*argv, "--port", str(port), "--log-level", "warning", *flags], logs)
    return ModelServer(process, port)


def wait_ready(server: ModelServer, timeout: float = 90.0) -> None:
    """Until /readyz answers 200; fails at once, with the log, if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.process.alive():
            raise RuntimeError(f"{server.process.name} exited:\n{server.process.log()}")
        try:
            if loopback.get(f"{server.url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)
    raise TimeoutError(f"{server.process.name} not ready after {timeout}s:\n{server.process.log()}")
