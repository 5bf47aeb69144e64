"""A host's faults as nft rules in a table of its own namespace: only its `eth0` is touched, so the host
still reaches itself on loopback. Every rule counts what it drops."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from typing import Protocol

TABLE = "inet graystack_faults"
CHAINS = (
    f"add table {TABLE}; "
    f"add chain {TABLE} input {{ type filter hook input priority 0 ; policy accept ; }}; "
    f"add chain {TABLE} output {{ type filter hook output priority 0 ; policy accept ; }}"
)
DIRECTIONS = {"in": ("in",), "out": ("out",), "both": ("in", "out")}


class Peer(Protocol):
    ip: str


Run = Callable[[list[str]], subprocess.CompletedProcess]


def nft(run: Run, script: str) -> str:
    """Runs an nft script (commands separated by `;`) through `run` (a host's); its output."""
    done = run(["nft", script])
    if done.returncode != 0:
        raise RuntimeError(f"nft {script!r} failed: {done.stderr.strip()}")
    return done.stdout


def match(direction: str, peers: Iterable[Peer | str]) -> str:
    """The rule's match: this host's eth0, and the peers' addresses (every address when none)."""
    addresses = ", ".join(peer if isinstance(peer, str) else peer.ip for peer in peers)
    if direction == "in":
        return 'iifname "eth0"' + (f" ip saddr {{ {addresses} }}" if addresses else "")
    return 'oifname "eth0"' + (f" ip daddr {{ {addresses} }}" if addresses else "")


def add_drops(
    run: Run, directions: Iterable[str], peers: tuple[Peer | str, ...], condition: str = ""
) -> None:
    rules = [
        f"add rule {TABLE} {'input' if way == 'in' else 'output'} {match(way, peers)} {condition} counter drop"
        for way in directions
    ]
    nft(run, "; ".join([CHAINS, *rules]))


def partition(run: Run, peers: tuple[Peer | str, ...], direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    add_drops(run, DIRECTIONS[direction], peers)


def lose(run: Run, percent: int, peers: tuple[Peer | str, ...]) -> None:
    if not 0 <= percent <= 100:
        raise ValueError(f"loss of {percent} %: between 0 and 100")
    add_drops(run, DIRECTIONS["both"], peers, f"numgen random mod 100 < {percent}")


def heal(run: Run) -> None:
    nft(run, f"add table {TABLE}; delete table {TABLE}")


def dropped(run: Run) -> int:
    """Packets the host's fault rules dropped since they were added (0 when it has none)."""
    listed = run(["nft", "-j", "list", "table", *TABLE.split()])
    if listed.returncode != 0:
        return 0
    return sum(
        expression["counter"]["packets"]
        for item in json.loads(listed.stdout)["nftables"]
        for expression in item.get("rule", {}).get("expr", [])
        if "counter" in expression
    )
