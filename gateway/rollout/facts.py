"""What the controller tells its watchers (gateway/notify/ turns it into notifications, and
gateway/rollout/story.py into Kubernetes Events): plain frozen
data, handed over after each look and each rollback confirmation. A watcher is called on the event
loop under the controller's lock, so it must only queue work, never wait on it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.rollout.rollout_state import Action, RecordDecision, RolloutState
from gateway.spec.model import RolloutSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Looked:
    """One look (or command): the state before and after it, its decision (None: a command alone) and
    every action the machine returned."""

    spec: RolloutSpec
    before: RolloutState
    after: RolloutState
    decision: RecordDecision | None
    now: float
    actions: tuple[Action, ...] = ()


@dataclass(frozen=True)
class RollbackAcked:
    """Every connected proxy ACKed the rollback, `seconds` after it started; `pending`: the proxies cut
    off from the control plane, still on the old split."""

    spec: RolloutSpec
    state: RolloutState
    seconds: float
    pending: tuple[str, ...]
    now: float


@dataclass(frozen=True)
class RollbackConfirmedLate:
    """The proxies a rollback was pending on came back and ACKed it (or were forgotten)."""

    spec: RolloutSpec
    proxies: tuple[str, ...]
    now: float


Fact = Looked | RollbackAcked | RollbackConfirmedLate
Watcher = Callable[[Fact], None]


def tell(watchers: Iterable[Watcher], fact: Fact) -> None:
    """Each watcher queues what it makes of `fact`; one that fails is logged, never the caller's end."""
    for watcher in watchers:
        try:
            watcher(fact)
        except Exception:
            log.exception("rollout %s: a watcher failed on %s", fact.spec.name, type(fact).__name__)
