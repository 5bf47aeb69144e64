"""The rollout controller's layer of the live split, which the Gateway composes over the spec file and the
operator's flips (gateway/service.py)."""

from __future__ import annotations

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
