"""Operator weight flips (`graystack weight`, admin API) layered over the spec file.

The file stays the user's source of truth: a flip holds until the file's own split for that
segment changes, so editing an unrelated field (a timeout, say) never undoes a flip.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.spec.model import RolloutSpec

Segment = str | None  # None: the default split; otherwise a routing-header value
Overrides = Mapping[Segment, Mapping[str, int]]


def apply_overrides(spec: RolloutSpec, overrides: Overrides) -> RolloutSpec:
    for segment, weights in overrides.items():
        spec = spec.with_split(weights, segment)
    return spec


def surviving_overrides(
    old_file: RolloutSpec, new_file: RolloutSpec, overrides: Overrides
) -> dict[Segment, dict[str, int]]:
    """The flips still in force after the file changed from `old_file` to `new_file`."""
    kept = {}
    for segment, weights in overrides.items():
        unchanged = _split_or_none(old_file, segment) == _split_or_none(new_file, segment)
        still_valid = _split_or_none(new_file, segment) is not None and set(weights) <= set(new_file.variants)
        if unchanged and still_valid:
            kept[segment] = dict(weights)
    return kept


def _split_or_none(spec: RolloutSpec, segment: Segment) -> dict[str, int] | None:
    if segment is None:
        return spec.routing.segment(None)
    for rule in spec.routing.rules:
        if rule.value == segment:
            return rule.split()
    return None
