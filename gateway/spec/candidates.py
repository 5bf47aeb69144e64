"""Several candidates beside the baseline (issue 38): what a spec that names them must hold. Pure.

Under a strategy, every variant but the baseline is a candidate, and each one moves through the steps
in its own lane, on its own evidence (gateway/rollout/candidates.py): one may stand at its third step
while another is still at its first, or rolled back. So the candidates' largest shares must fit in the
default split together, whatever stage each one stands at, not only step by step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from gateway.spec.strategy import Strategy


class Served(Protocol):
    """A variant's servers as the spec names them (gateway/spec/model.py's `Variant`)."""

    @property
    def endpoints(self) -> Sequence[tuple[str, int]] | None: ...

    @property
    def service(self) -> str | None: ...

    @property
    def port(self) -> int | None: ...


def check_candidates(
    strategy: Strategy | None,
    candidates: Sequence[str],
    variants: Mapping[str, Served],
    users_gateway: str | None,
) -> None:
    """ValueError naming the field where the candidates cannot each run a lane of their own.
    `users_gateway`: the section that hands the split to the user's gateway (None: graystack's Envoy)."""
    steps = strategy.steps if strategy is not None else []
    for index, step in enumerate(steps):
        unknown = sorted(set(step.weights) - set(candidates))
        if unknown:
            raise ValueError(
                f"strategy.steps.{index}.weights: {unknown} are not candidates; the candidates are "
                f"{list(candidates)} (the baseline takes what they leave)"
            )
    if strategy is None or len(candidates) < 2:
        return
    largest = slots(strategy, candidates)
    if sum(largest.values()) > 100:
        shares = ", ".join(f"{candidate} {share}" for candidate, share in largest.items())
        raise ValueError(
            f"strategy.steps: the candidates' largest shares sum to {sum(largest.values())} % ({shares}); "
            "each candidate moves through the steps on its own evidence, so together they must fit in "
            "100 % (give each its own share with `weights`)"
        )
    if strategy.experiment is not None and strategy.experiment.mirror_percent:
        raise ValueError(
            f"strategy.experiment.mirror_percent: a mirror copies to one variant; with several candidates "
            f"({', '.join(candidates)}) leave it at 0"
        )
    if strategy.shadow is not None:
        raise ValueError(
            f"strategy.shadow: a shadow stage mirrors to one variant; with several candidates "
            f"({', '.join(candidates)}) leave it out"
        )
    if users_gateway is not None:
        raise ValueError(
            f"{users_gateway}: several candidates ({', '.join(candidates)}) run on graystack's own Envoy "
            "for now; roll them out one at a time on the user's gateway"
        )
    seen: dict[tuple[object, ...], str] = {}
    for candidate in candidates:
        served = variants[candidate]
        where = (tuple(sorted(served.endpoints)),) if served.endpoints else (served.service, served.port)
        if where in seen:
            field = "endpoints" if served.endpoints else "service"
            raise ValueError(
                f"variants.{candidate}.{field}: the same as variants.{seen[where]}'s; two candidates served "
                "by the same pods cannot be told apart"
            )
        seen[where] = candidate


def slots(strategy: Strategy | None, candidates: Sequence[str]) -> dict[str, int]:
    """Each of several candidates' largest share (the room its cohort may take: gateway/envoy/affinity.py);
    {} for one candidate, or without a strategy."""
    if strategy is None or len(candidates) < 2:
        return {}
    if strategy.experiment is not None:
        return {candidate: strategy.experiment.weights.get(candidate, 0) for candidate in candidates}
    return {candidate: max(step.share(candidate) for step in strategy.steps) for candidate in candidates}
