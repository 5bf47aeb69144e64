"""Which variant (pure): the rollout's split drawn per request, or hashed from a cohort key; which of its
pods is gateway/epp/scorers.py's."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping

from gateway.envoy.affinity import nested_order


def position(key: str | None, draw: float, total: int) -> int:
    """Where a request lands in `[0, total)`: its key's stable hash (the same key, the same place, in every
    replica and after a restart), or the uniform `draw` in [0, 1) for a request without one."""
    if key is None:
        return min(int(draw * total), total - 1)
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % total


def choose_variant(
    split: Mapping[str, int], baseline: str, eligible: Collection[str], key: str | None, draw: float
) -> str | None:
    """The variant whose range holds the request's position, over the split's variants that have an
    eligible pod, in the nested order (a weight change moves only the clients at the moving edge). None
    when no variant with weight has one."""
    order = [(variant, weight) for variant, weight in nested_order(split, baseline) if variant in eligible]
    total = sum(weight for _, weight in order)
    if total == 0:
        return None
    at = position(key, draw, total)
    for variant, weight in order:
        if at < weight:
            return variant
        at -= weight
    raise AssertionError("a position lies beyond the split's total")
