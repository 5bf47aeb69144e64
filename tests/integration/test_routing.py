"""Header rules and weighted splits, through the real Envoy, programmed by the real gateway."""

from scipy.stats import binomtest


def test_header_rules_send_every_matching_request_to_their_variant(stack):
    assert stack.variant_counts(200, {"X-Client-Type": "high_load"}) == {"baseline": 0, "zero-layer": 200}
    # Values match exactly (Envoy's header value match is case-sensitive); names do not.
    assert stack.variant_counts(50, {"x-client-type": "high_load"}) == {"baseline": 0, "zero-layer": 50}
    assert stack.variant_counts(50, {"X-Client-Type": "HIGH_LOAD"}) == {"baseline": 50, "zero-layer": 0}


def test_unmatched_requests_split_by_weight(stack):
    stack.cli("weight", "zero-layer=20")
    counts = stack.variant_counts(2000)
    test = binomtest(counts["zero-layer"], 2000, 0.20)
    assert test.pvalue > 0.01, f"{counts} is not an 80/20 split (p={test.pvalue:.4f})"


def test_a_segment_splits_by_its_own_weights(stack):
    counts = stack.variant_counts(1000, {"X-Client-Type": "mobile"})
    test = binomtest(counts["zero-layer"], 1000, 0.20)
    assert test.pvalue > 0.01, f"mobile: {counts} is not its 80/20 split (p={test.pvalue:.4f})"
    # The default split (100/0 in the spec) is untouched by the segment's.
    assert stack.variant_counts(100) == {"baseline": 100, "zero-layer": 0}
