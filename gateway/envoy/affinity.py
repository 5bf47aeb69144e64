"""Sticky, nested cohorts on the route: which variant a keyed client gets (pure).

With `routing.affinity` set, every split route hashes the client's key (the header
`names.AFFINITY_HEADER`, which the affinity filter fills from the first source present,
gateway/envoy/affinity_filter.py) and its weighted clusters take their pick from that hash
(`WeightedCluster.use_hash_policy`). Envoy 1.40 picks `hash % total_weight` and walks the clusters in
list order, the first whose running sum passes that value winning. A request with no key has no hash,
and Envoy draws a random value instead: it is split at random, as without affinity.

So a client's variant is a function of its key and the live weights: no pin store, every Envoy replica
agrees, a restart changes nothing. It is NESTED when two things hold:
  - the total weight is constant: the spec's splits sum to 100 (gateway/spec/model.py), and a variant at
    0 is left out, which takes no room from the others;
  - the clusters keep one order, whatever the weights: `nested_order`.

The order: the baseline first (the variant `GET /v1/models` and the fallback retries go to, routes.py's
`baseline_variant`), then the other variants by name. The baseline holds `[0, b)` and the first candidate
`[b, b + w1)` with `b = 100 - w1 - ...`: a change to the first candidate's weight, the baseline taking up the
difference, moves only the edge between the two. Raising it moves clients from the baseline to the
candidate only, lowering it moves them back only, and a rollback (the baseline at 100) puts every client on
the baseline. With one candidate (a gray release) that is every change. Per-segment splits (header rules)
follow the same order, so each segment's cohorts nest alike; a rule that pins one variant has one
cluster. The fallback aggregates (`<variant>-with-fallback`) stand in their variant's place: the order is
the variants', not the clusters' names. It is also the order graystack always used for the usual names
(`baseline` sorts before the candidates), so specs without affinity see no change.

Several candidates, each moving on its own (gateway/rollout/candidates.py), get a slot each: candidate `c`
holds `[s, s + w_c)` of a slot `[s, s + S_c)` whose size `S_c` is the largest share its schedule gives it,
and the baseline holds the rest of each slot (and the room no slot takes, first). The baseline is listed
once per slot (Envoy takes one cluster twice in a split). A candidate's steps then move only its own
slot's edge, and its rollback empties only its own slot: every other candidate keeps its cohort whatever
the others do. A split that does not fit the slots (a header rule's own, or an operator's flip) takes
the contiguous order, where a rollback still moves nobody else (the baseline, first, takes up the share).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envoy.config.route.v3 import route_components_pb2

from gateway import names
from gateway.spec.affinity import AffinitySource


def nested_order(
    split: Mapping[str, int], baseline: str, slots: Mapping[str, int] | None = None
) -> list[tuple[str, int]]:
    """`split`'s variants with a weight, in the order that keeps cohorts nested (the module's docstring);
    `slots`: several candidates' slot sizes (None: one candidate)."""
    order = [baseline, *sorted(variant for variant in split if variant != baseline)]
    if slots and all(split.get(variant, 0) <= slots.get(variant, 0) for variant in order[1:]):
        ranges = [(baseline, 100 - sum(slots.values()))]
        for candidate in sorted(slots):
            share = split.get(candidate, 0)
            ranges += [(candidate, share), (baseline, slots[candidate] - share)]
        return [(variant, weight) for variant, weight in ranges if weight > 0]
    return [(variant, split[variant]) for variant in order if split.get(variant, 0) > 0]


def hash_policies(affinity: Sequence[AffinitySource]) -> list[route_components_pb2.RouteAction.HashPolicy]:
    """The route's hash over the affinity key; none without affinity (a random split, as ever). The same
    hash picks the pod on a variant balanced by `ring_hash` or `maglev` (gateway/envoy/balancing.py)."""
    if not affinity:
        return []
    return [
        route_components_pb2.RouteAction.HashPolicy(
            header=route_components_pb2.RouteAction.HashPolicy.Header(header_name=names.AFFINITY_HEADER)
        )
    ]
