"""Several candidates' lanes driven together: the I/O edge of gateway/rollout/candidates.py.

Each candidate gets a `RolloutController` of its own: its looks, tests, state (saved in its own store),
alerts, rollback confirmation and notifications, all under its lane's name. What the lanes share is the
gateway: each lane's controller sees the spec through its lane (`LaneTarget`), and the split it sets is
made into the one split the gateway serves with the other lanes' (`composed`). An operator command goes
to the lane it names, or to every lane.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from gateway.rollout.candidates import composed, lane_name, lane_spec
from gateway.rollout.controller import RolloutController, SplitTarget
from gateway.rollout.facts import Watcher
from gateway.rollout.fleet import Proxies
from gateway.rollout.guard import ProviderFactory
from gateway.rollout.rollout_state import Command
from gateway.rollout.state_store import StateStore
from gateway.rollout.status import RolloutStatus
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.split import RolloutSplit


class LaneTarget:
    """One lane's view of the gateway (a `SplitTarget`): the spec as its candidate sees it, and its own
    layer of the split, which the gateway serves composed with the other lanes'."""

    def __init__(self, gateway: SplitTarget, candidate: str, lanes: Lanes) -> None:
        self._gateway = gateway
        self.candidate = candidate
        self._lanes = lanes
        self.rollout = RolloutSplit()
        self._seen: dict[str, tuple[RolloutSpec, RolloutSpec]] = {}  # spec kind -> (spec, the lane's view)

    def _view(self, kind: str, spec: RolloutSpec) -> RolloutSpec:
        """`spec` as the lane sees it, kept while the gateway's spec is the same object (it is immutable)."""
        seen = self._seen.get(kind)
        if seen is None or seen[0] is not spec:
            seen = (spec, lane_spec(spec, self.candidate))
            self._seen[kind] = seen
        return seen[1]

    @property
    def spec(self) -> RolloutSpec:
        return self._view("file", self._gateway.spec)

    @property
    def live(self) -> RolloutSpec:
        return self._view("live", self._gateway.live)

    def set_rollout_split(self, rollout: RolloutSplit) -> RolloutSpec:
        before, self.rollout = self.rollout, rollout
        try:
            self._gateway.set_rollout_split(self._lanes.composed())
        except SpecError:
            self.rollout = before
            raise
        return self.live


class Lanes:
    """A rollout of several candidates (`spec.lanes`), a lane each; what the admin API and the local
    driver ask of a controller: `restore`, `run`, `command`, `status`."""

    def __init__(
        self,
        gateway: SplitTarget,
        candidates: Sequence[str],
        proxies: Proxies,
        make_provider: ProviderFactory,
        store_for: Callable[[str], StateStore],
        clock: Callable[[], float] = time.time,
        watchers: Sequence[Watcher] = (),
    ) -> None:
        """`store_for(lane)`: where the lane of that name (`lane_name`) saves its state."""
        self.gateway = gateway
        self.targets = {candidate: LaneTarget(gateway, candidate, self) for candidate in candidates}
        self.controllers = {
            candidate: RolloutController(
                target,
                proxies,
                make_provider,
                store_for(lane_name(gateway.spec.name, candidate)),
                clock=clock,
                watchers=watchers,
            )
            for candidate, target in self.targets.items()
        }

    def composed(self) -> RolloutSplit:
        """The split every lane's layer makes together (gateway/rollout/candidates.py)."""
        lanes = {candidate: target.rollout for candidate, target in self.targets.items()}
        return composed(self.gateway.spec, self.gateway.live.routing.weights, lanes)

    def restore(self) -> None:
        for controller in self.controllers.values():
            controller.restore()

    async def run(self) -> None:
        await asyncio.gather(*(controller.run() for controller in self.controllers.values()))

    async def command(self, command: Command, candidate: str | None = None) -> str | None:
        """`command` for `candidate`'s lane, or for every lane (None); why it was ignored by every lane it
        was sent to (None: at least one applied it)."""
        if candidate is not None and candidate not in self.controllers:
            return f"no candidate {candidate!r} in this rollout (candidates: {', '.join(self.controllers)})"
        chosen = [candidate] if candidate is not None else list(self.controllers)
        ignored = [(name, await self.controllers[name].command(command)) for name in chosen]
        reasons = [f"{name}: {why}" for name, why in ignored if why is not None]
        return "; ".join(reasons) if len(reasons) == len(chosen) else None

    def status(self) -> RolloutStatus:
        """The first candidate's lane, with every lane's (`candidates`)."""
        lanes = [controller.status() for controller in self.controllers.values()]
        return lanes[0].model_copy(update={"candidates": lanes})
