"""The rollout controller's layer of the live split, which the Gateway composes over the spec file and the
operator's flips (gateway/service.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gateway.spec.model import Mirror


@dataclass(frozen=True)
class RolloutSplit:
    """The rollout controller's layer: the default split it sets (None: leave it to the spec and the
    operator), the variant every header segment goes to (None: each segment keeps its own), and,
    while it sets the split, the mirroring too (None: none). With several candidates, `withdrawn`: the
    candidates rolled back alone, whose share of every segment goes to the baseline."""

    weights: dict[str, int] | None = None
    segments_to: str | None = None
    mirror: Mirror | None = None
    withdrawn: tuple[str, ...] = ()


def to_baseline(split: Mapping[str, int], moved: Collection[str], baseline: str) -> dict[str, int]:
    """`split` with the `moved` variants' shares given to the baseline: a candidate withdrawn from a
    segment (gateway/service.py), or the other candidates as one candidate's lane sees a split
    (gateway/rollout/candidates.py)."""
    kept = {variant: share for variant, share in split.items() if variant not in moved}
    return kept | {baseline: kept.get(baseline, 0) + sum(split.get(variant, 0) for variant in moved)}
