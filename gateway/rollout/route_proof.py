"""The two proofs of one split written to the user's Gateway API gateway (issue 36), as they stand. Pure:
the edge (gateway/kubernetes/gateway_api.py) reads the routes' status and the answers, and hands them
here; `gate` is what the state machine is told (gateway/rollout/rollout_state.py `SplitGate`).

In order: the control plane (every parent Gateway reports the route Accepted and its references
resolved, at the generation written or later), then the data plane (the answers that started after that
acceptance, attributed to variants by the endpoint that served each, tested sequentially against the
asked share: gateway/rollout/sequential/split.py). Answers from before the acceptance and the `settle`
after it are not counted: a gateway writes Accepted as it translates, and its proxies serve the split
before until they are programmed. A gateway that refused the route (a condition
False), a write the API server refused, or the weights changed by someone else under `on_drift: hold`
is refuted at once: a person must act. A route merely not yet accepted is pending, however long
(Flagger's own proof is this one alone, so a gateway that never reports is held here, not passed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gateway.rollout.rollout_state import CONTROL_PLANE, DATA_PLANE, SplitGate
from gateway.rollout.sequential.split import Proof, SplitTest


@dataclass(frozen=True)
class RouteProof:
    """One written split: its default weights, the candidate whose share is tested, the data plane's
    test, how long the proxies are given after the acceptance, when the control plane was first proven
    (None: not yet), and the answers that could not be placed (why -> count)."""

    asked: Mapping[str, int]
    candidate: str
    test: SplitTest
    settle: float = 0.0
    accepted_at: float | None = None
    unplaced: Counter[str] = field(default_factory=Counter)

    @classmethod
    def start(cls, asked: Mapping[str, int], candidate: str, settle: float = 0.0) -> RouteProof:
        total = sum(asked.values())
        share = asked.get(candidate, 0) / total if total else 0.0
        return cls(dict(asked), candidate, SplitTest(asked=share), settle)

    @property
    def counted_from(self) -> float | None:
        """The answers that start from then on are the data plane's evidence (None: not accepted yet)."""
        return None if self.accepted_at is None else self.accepted_at + self.settle

    def accepted(self, now: float) -> RouteProof:
        """The control plane's proof holds from `now` (kept from its first time)."""
        return self if self.accepted_at is not None else replace(self, accepted_at=now)

    def add(self, placed: Mapping[str, int], unplaced: Mapping[str, int]) -> RouteProof:
        """Answers that started from `counted_from`: per variant, and those no variant's endpoint served."""
        if self.accepted_at is None:
            return self
        test = self.test.add(placed.get(self.candidate, 0), sum(placed.values()))
        return replace(self, test=test, unplaced=self.unplaced + Counter(unplaced))

    def gate(self, problems: list[tuple[str, bool]], alpha: float) -> SplitGate:
        """The machine's gate from the control plane's problems read at this look ((why, a refusal),
        gateway/gatewayapi/status.py), then the data plane's test."""
        if problems:
            refusal = any(refused for _, refused in problems)
            return SplitGate(CONTROL_PLANE, refusal, dict(self.asked), "; ".join(why for why, _ in problems))
        proof = self.test.proof(alpha)
        said = f"{self.candidate}: {self.test.describe()}{self._unplaced()}"
        if proof == Proof.SHOWN:
            return SplitGate(None, False, dict(self.asked), said)
        return SplitGate(DATA_PLANE, proof == Proof.REFUTED, dict(self.asked), said)

    def _unplaced(self) -> str:
        if not self.unplaced:
            return ""
        counts = ", ".join(f"{count} {why}" for why, count in self.unplaced.most_common())
        return f"; answers no variant's endpoint served: {counts}"


def refused(asked: Mapping[str, int], why: str) -> SplitGate:
    """The split could not be written, or was changed under the rollout: nothing can be proven."""
    return SplitGate(CONTROL_PLANE, True, dict(asked), why)
