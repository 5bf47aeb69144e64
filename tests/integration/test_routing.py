"""Header rules and weighted splits, through the real Envoy, programmed by the real gateway.

Splits are judged by a binomial test at the 1 % level. A correct split still fails such a test 1 % of
the time, so a rejected sample is drawn once more and the split fails only if both are rejected
(1 in 10,000 for a correct split; a real 75/25 instead of 80/20 is rejected at p < 1e-6 on each).
"""

from collections.abc import Iterator

import pytest
from scipy.stats import binomtest

from graystack.local.gateway_stack import GatewayStack
from tests.support.stacks import restoring, variant_counts


@pytest.fixture
def stack(shared_stack) -> Iterator[GatewayStack]:
    """The module's stack as it started (its spec, no flip), and so again after the test
    (tests/support/stacks.py `restoring`)."""
    yield from restoring(shared_stack)


def assert_split(stack, n: int, share: float, headers: dict | None = None) -> None:
    tests = []
    for _ in range(2):
        counts = variant_counts(stack, n, headers)
        tests.append((counts, binomtest(counts["zero-layer"], n, share).pvalue))
        if tests[-1][1] > 0.01:
            return
    raise AssertionError(f"not a {1 - share:.0%}/{share:.0%} split: {tests}")


def test_header_rules_send_every_matching_request_to_their_variant(stack):
    assert variant_counts(stack, 200, {"X-Client-Type": "high_load"}) == {"baseline": 0, "zero-layer": 200}
    # Values match exactly (Envoy's header value match is case-sensitive); names do not.
    assert variant_counts(stack, 50, {"x-client-type": "high_load"}) == {"baseline": 0, "zero-layer": 50}
    assert variant_counts(stack, 50, {"X-Client-Type": "HIGH_LOAD"}) == {"baseline": 50, "zero-layer": 0}


def test_unmatched_requests_split_by_weight(stack):
    stack.cli("weight", "zero-layer=20")
    assert_split(stack, 2000, 0.20)


def test_a_segment_splits_by_its_own_weights(stack):
    assert_split(stack, 1000, 0.20, {"X-Client-Type": "mobile"})
    # The default split (100/0 in the spec) is untouched by the segment's.
    assert variant_counts(stack, 100) == {"baseline": 100, "zero-layer": 0}


def test_an_endpoint_that_leaves_a_variant_stops_taking_its_traffic_though_still_healthy(stack):
    """A scale-down or a terminating pod: the endpoint leaves EDS while it still answers its health
    checks. Envoy would keep sending it traffic until it failed them, unless told otherwise
    (`ignore_health_on_host_removal`). The baseline's stand-in lends its address to zero-layer here, so
    its answers show where the removed endpoint's traffic went."""
    spec = stack.spec
    zero_layer, baseline = (f"127.0.0.1:{stack.ports[v]}" for v in ("zero-layer", "baseline"))
    spec["variants"]["zero-layer"]["endpoints"] = [zero_layer, baseline]
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)
    assert variant_counts(stack, 40, {"X-Client-Type": "high_load"})["baseline"] > 0  # both hosts serve it
    spec["variants"]["zero-layer"]["endpoints"] = [zero_layer]
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)
    assert variant_counts(stack, 100, {"X-Client-Type": "high_load"}) == {"baseline": 0, "zero-layer": 100}
