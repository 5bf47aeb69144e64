"""GIE's conformance check on a weighted split (gateway_weighted_two_pools.go), shared by the tests that
port it: over HTTPRoute weights (test_gie_conformance.py) and over graystack's picker
(test_gie_conformance_epp.py)."""

from __future__ import annotations

import math


def gie_passes(secondary: int, total: int, expected_secondary: float) -> bool:
    """The Go test's own check: the observed share within max(10 points, 4.5 sigma) of the expected."""
    sigma = math.sqrt(expected_secondary * (1 - expected_secondary) / total)
    return abs(secondary / total - expected_secondary) <= max(0.10, 4.5 * sigma)
