"""Starting and stopping local processes: free loopback ports, bounded waits, stop by PID."""

from __future__ import annotations

import errno
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from graystack.local.port_claims import claim

T = TypeVar("T")


_HANDED_OUT: deque[int] = deque(maxlen=1024)
LOWEST_PORT = 10_000  # below it: the well-known and registered services a machine may run


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """The ports the kernel gives outgoing connections as their source port (Linux's default range where
    the file cannot be read)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port() -> int:
    """A loopback port nothing holds now, and not one this process handed out recently: callers pick
    several before anything binds them (a stack's ports, then its servers' and probes'), and the
    kernel may offer the same unbound port twice, which two processes of one stack then fight over.
    Drawn below the kernel's ephemeral range: a port it offers for bind(0) is one it also gives outgoing
    connections as their source port, so any client connecting between the pick and the bind could take
    it (CI once saw Envoy exit `Address already in use` so, on a listener port picked a moment before).
    Claimed machine-wide (port_claims): another process picking before this one's binds skips it."""
    below = ephemeral_ports().start
    while True:
        if below - LOWEST_PORT >= 1000:
            port = random.randrange(LOWEST_PORT, below)
        else:  # a kernel whose ephemeral range leaves no room below it: its own pick
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        if port not in _HANDED_OUT and not port_in_use(port) and claim(port):
            _HANDED_OUT.append(port)
            return port


def port_in_use(port: int) -> bool:
    """Whether something already listens on (or holds) 127.0.0.1:`port`."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


class StartupError(RuntimeError):
    """A process of the stack did not come up; the message says which, why, and where its log is."""


def wait_until(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as error:  # the thing being waited for may not be up yet
            last_error = error
        else:
            if result:
                return result
        time.sleep(interval)
    raise TimeoutError(
        f"timed out after {timeout}s waiting for {what}" + (f" ({last_error})" if last_error else "")
    )


@dataclass
class ManagedProcess:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_healthy(self, check: Callable[[], object], timeout: float, what: str) -> None:
        """Wait for `check`; a StartupError with the log's last lines if the process exits or times out."""
        try:
            wait_until(lambda: not self.alive() or check(), timeout, what, interval=0.1)
        except TimeoutError as error:
            raise StartupError(f"{error}; the end of {self.log_path}:\n{self.log_tail()}") from None
        if not self.alive():
            raise StartupError(
                f"{self.name} exited (code {self.popen.returncode}) before {what} was ready; "
                f"the end of {self.log_path}:\n{self.log_tail()}"
            )

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, and SIGKILL if it has not exited within `grace` seconds."""
        stop_together([self], grace)


def stop_together(processes: Iterable[ManagedProcess], grace: float = 5.0) -> None:
    """`ManagedProcess.stop` for several at once: each is asked to stop before any is waited for, so
    their shutdowns overlap (a stack's four model servers and probes: 0.2 s, not 0.75)."""
    asked = [process for process in processes if process.alive()]
    for process in asked:
        process.popen.terminate()
    deadline = time.monotonic() + grace
    for process in asked:
        try:
            process.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait(timeout=10)


# Arms PR_SET_PDEATHSIG (1, linux/prctl.h) with SIGTERM, then becomes the program (same PID). argv[1]
# is the starting process: if it died before the prctl, no signal will come, so give up.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def dying_with_parent(argv: list[str], path: str | None = None) -> list[str]:
    """`argv` so that, on Linux, the program gets SIGTERM when the process starting it dies, even by
    SIGKILL (which leaves no chance to stop it by PID): a killed `up` or test run leaves no orphan
    holding its ports. (Linux sends it when the starting *thread* ends: start stacks from the main
    thread.) The program is found on `path` (default: PATH) here, so a missing one fails as Popen's.

    A shim and not Popen's preexec_fn: with one, Popen forks (not vfork) and the child runs every
    pthread_atfork handler. gRPC's restart its event engine in the child, whose poller then aborts
    it when Popen closes the child's descriptors before exec: about 1 in 100 starts from a process
    with an xDS server or channel (an Envoy that died at birth, in CI)."""
    if not sys.platform.startswith("linux"):
        return argv
    program = shutil.which(argv[0], path=path)
    if program is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), program, *argv[1:]]


def start_process(
    name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None
) -> ManagedProcess:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    environment = {**os.environ, **(env or {})}
    popen = subprocess.Popen(
        dying_with_parent(argv, environment.get("PATH")),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=environment,
    )
    log_file.close()
    return ManagedProcess(name, popen, log_path)
