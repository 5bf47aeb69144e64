"""Hosts on a real network, for tests: one network namespace per host, joined by a bridge in the root
namespace, with faults (partitions, loss) as nft rules inside a host and delay through a userspace proxy
(the kernel here has no netem). Needs root, `ip` and `nft`; `unavailable` otherwise.

Names carry the creating process's PID (`gs<pid>-<n>`), so parallel sessions do not collide and a later
session can remove what a crashed one left behind."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from graystack.local.processes import dying_with_parent, wait_until
from tests.support import network_faults as faults
from tests.support.processes import unavailable

REPO = Path(__file__).resolve().parents[2]
OWNED = re.compile(r"^gs(\d+)-\d+(?=-|$)")  # bridges, veths and namespaces this harness made, by creating PID
IFNAMSIZ = 15
_instances = itertools.count()


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs `ip ARGS`; with `check`, a RuntimeError carrying ip's own message when it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def module_argv(module: str, *args: str) -> list[str]:
    """argv running a module of this repository with this interpreter (hosts put the repository on
    PYTHONPATH, so it imports from any cwd)."""
    return [sys.executable, "-m", module, *args]


def host_env(env: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def network_of(name: str) -> str | None:
    """`gs<pid>-<n>` for a link or namespace this harness made (any session's), None for others."""
    owned = OWNED.match(name)
    return owned[0] if owned else None


class Host:
    """One machine of the network: a namespace whose `eth0` is plugged into the bridge."""

    def __init__(self, network: Network, name: str, namespace: str, address: str) -> None:
        self.network = network
        self.name = name
        self.namespace = namespace
        self.ip = address

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.ip})"

    def exec_argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Starts `argv` in this host, output to `log`; the network stops it by PID on close. `ip netns exec`
        execs the program, so the PID is the program's."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(
                dying_with_parent(self.exec_argv(argv)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=host_env(env),
            )
        self.network.processes.append(process)
        return process

    def run(self, argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Runs `argv` in this host to completion; output captured as text, the exit status not checked."""
        return subprocess.run(
            self.exec_argv(argv), capture_output=True, text=True, timeout=timeout, env=host_env()
        )

    def listening(self, port: int) -> bool:
        """Whether something in this host listens on TCP `port`."""
        found = self.run(["ss", "-Hltn", f"sport = :{port}"], timeout=10)
        return found.returncode == 0 and bool(found.stdout.strip())

    def wait_listening(self, port: int, process: subprocess.Popen, timeout: float = 10.0) -> None:
        """Waits until `process` (started here) listens on `port`; RuntimeError if it exits first."""
        wait_until(
            lambda: process.poll() is not None or self.listening(port), timeout, f"port {port} in {self}"
        )
        if process.poll() is not None:
            raise RuntimeError(
                f"{process.args} exited ({process.returncode}) before listening on {port} in {self}"
            )

    def partition(self, *peers: Host | str, direction: str = "both") -> None:
        """Silently drops this host's traffic to/from `peers` (every address when none), like a cut cable
        or a firewall: connects time out, nothing is refused. direction: "both", "in" or "out"."""
        faults.partition(self.run, peers, direction)

    def lose(self, percent: int, *peers: Host | str) -> None:
        """Drops `percent` % of packets, at random, both ways, to/from `peers` (every address when none)."""
        faults.lose(self.run, percent, peers)

    def heal(self) -> None:
        """Removes every fault rule of this host."""
        faults.heal(self.run)

    def dropped(self) -> int:
        """Packets this host's fault rules dropped so far."""
        return faults.dropped(self.run)

    def delay_proxy(self, listen_port: int, target: tuple[str, int], one_way_ms: float) -> tuple[str, int]:
        """Starts a TCP proxy in this host that forwards to `target`, each chunk `one_way_ms` late in each
        direction (tests/support/delay_proxy.py); returns the address clients in other hosts connect to."""
        argv = module_argv(
            "tests.support.delay_proxy", str(listen_port), f"{target[0]}:{target[1]}", str(one_way_ms)
        )
        log = self.network.log_dir / f"{self.name}-delay-{listen_port}.log"
        self.wait_listening(listen_port, self.start(argv, log))
        return self.ip, listen_port


class Network:
    """A bridge, a /24 of its own and the hosts on it. `close()` (also on leaving the `with` block, by an
    exception too) stops every process started through it and deletes its namespaces, veths and bridge.
    The bridge holds the subnet's .1, so the test process reaches every host at `host.ip`."""

    def __init__(self, log_dir: Path) -> None:
        require_network()
        remove_stale()
        self.log_dir = log_dir
        self.prefix = f"gs{os.getpid()}-{next(_instances)}"
        self.bridge = self.prefix
        self.subnet = free_subnet()
        self.hosts: dict[str, Host] = {}
        self.processes: list[subprocess.Popen] = []
        try:
            ip("link", "add", self.bridge, "type", "bridge")
        except RuntimeError as error:  # root in a container without CAP_NET_ADMIN
            unavailable(f"the network harness cannot create a bridge: {error}")
        try:
            ip("addr", "add", f"{self.subnet[1]}/{self.subnet.prefixlen}", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def host(self, name: str) -> Host:
        """A new host named `name` (letters, digits, dashes), at the subnet's next address."""
        if not re.fullmatch(r"[a-z0-9-]+", name) or name in self.hosts:
            raise ValueError(
                f"host name {name!r}: lowercase letters, digits and dashes, unique in the network"
            )
        index = len(self.hosts)
        veth = f"{self.prefix}-{index}"
        if len(veth) > IFNAMSIZ:
            raise ValueError(f"interface name {veth!r} is longer than {IFNAMSIZ} characters")
        host = Host(self, name, f"{self.prefix}-{name}", str(self.subnet[index + 2]))
        self.hosts[name] = host
        ip("netns", "add", host.namespace)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("-n", host.namespace, "addr", "add", f"{host.ip}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", host.namespace, "link", "set", "eth0", "up")
        ip("-n", host.namespace, "link", "set", "lo", "up")
        return host

    def close(self, grace: float = 5.0) -> None:
        """Stops the processes (SIGTERM, SIGKILL after `grace`), then deletes namespaces, veths, bridge."""
        try:
            stop(self.processes, grace)
        finally:
            remove_links(lambda name: network_of(name) == self.prefix)
            for host in self.hosts.values():
                remove_namespace(host.namespace)


def require_network() -> None:
    """`unavailable` unless this process can make namespaces and bridges: root, `ip`, `ss`, `nft`."""
    for tool in ("ip", "nft", "ss"):
        if shutil.which(tool) is None:
            unavailable(
                f"`{tool}` not found (the network harness needs iproute2 and nftables: `make nftables`)"
            )
    if os.geteuid() != 0:
        unavailable("the network harness needs root (network namespaces, a bridge, nft)")


def stop(processes: list[subprocess.Popen], grace: float) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def remove_namespace(namespace: str) -> None:
    """SIGKILLs what still runs in `namespace` (children of what the harness started), then deletes it;
    its end of each veth goes with it."""
    for pid in ip("netns", "pids", namespace, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    ip("netns", "del", namespace, check=False)


def remove_links(matches: Callable[[str], bool]) -> None:
    """Deletes the root namespace's links whose name `matches` (veths first: deleting one end deletes both)."""
    for name in sorted(filter(matches, links()), key=len, reverse=True):
        ip("link", "del", name, check=False)


def remove_stale() -> None:
    """Removes the namespaces and links of earlier sessions whose creating process is gone (a crash)."""

    def stale(name: str) -> bool:
        owner = OWNED.match(name)
        return owner is not None and not Path(f"/proc/{owner[1]}").exists()

    remove_links(stale)
    for namespace in namespaces():
        if stale(namespace):
            remove_namespace(namespace)


def namespaces() -> list[str]:
    """What `ip netns list` shows, by name."""
    return [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]


def links() -> list[str]:
    """What `ip link` shows in the root namespace, by name (a veth's `@peer` left off)."""
    return [line.split(":")[1].strip().split("@")[0] for line in ip("-o", "link").stdout.splitlines()]


def free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no address or route of the root namespace overlaps, picked at random so
    parallel sessions rarely race for the same one."""
    used = [
        ipaddress.ip_network(word, strict=False)
        for line in ip("-4", "route", "show", "table", "all").stdout.splitlines()
        + ip("-4", "-o", "addr").stdout.splitlines()
        for word in line.split()
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+(/\d+)?", word)
    ]
    for _ in range(1000):
        subnet = ipaddress.ip_network(f"10.{random.randrange(1, 255)}.{random.randrange(256)}.0/24")
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 in the root namespace")
