"""Exact fixed-sample bounds (a load test's summary), and the retired window rule the decision benchmark
measures the shipped tests against: it must be the rule that shipped, bound for bound."""

import numpy as np
import pytest

from bench import retired_rules
from loadtests.split import exact_bounds

THRESHOLD = 0.003


def test_bounds_match_the_textbook_sample_sizes():
    """Proving a rate below 0.3 % with 0 errors takes about 1,000 requests (research report §5.3: 999)."""
    assert exact_bounds(0, 999).upper < THRESHOLD < exact_bounds(0, 997).upper
    assert exact_bounds(1, 1582).upper < THRESHOLD < exact_bounds(1, 1579).upper
    assert exact_bounds(3, 2585).upper < THRESHOLD < exact_bounds(3, 2580).upper


@pytest.mark.parametrize("confidence", [0.99, 0.995])
def test_the_retired_rules_table_is_the_clopper_pearson_bound_it_replaced(confidence):
    """A window fails exactly when its exact lower bound exceeds the threshold."""
    sizes = np.arange(0, 3000, 7)
    fewest = retired_rules.fewest_failing(sizes, THRESHOLD, confidence)
    for n, x in zip(sizes[1:], fewest[1:], strict=True):
        assert exact_bounds(int(x), int(n), confidence).lower > THRESHOLD
        if x > 0:
            assert exact_bounds(int(x) - 1, int(n), confidence).lower <= THRESHOLD


def test_the_retired_latency_rule_reads_quantiles_as_prometheus_does():
    edges = np.array([0.1, 0.2, 0.4])
    buckets = np.array([[10.0, 60.0, 90.0, 100.0]])  # cumulative, +Inf last
    assert retired_rules.quantile(0.5, edges, buckets)[0] == pytest.approx(0.1 + 0.1 * 40 / 50)
    assert retired_rules.quantile(0.99, edges, buckets)[0] == 0.4  # in +Inf: the highest finite edge
    assert np.isnan(retired_rules.quantile(0.5, edges, np.zeros((1, 4))))[0]


def test_the_retired_rules_window_holds_the_last_looks_counts():
    """Each look's window is the sum over it and the looks before it, at most `window` of them, whatever
    the array's layout (the benchmark passes a (looks, runs, buckets) array transposed)."""
    counts = np.random.default_rng(0).poisson(3.0, (30, 4, 5)).transpose(1, 0, 2)  # (runs, looks, buckets)
    sums = retired_rules.rolling(counts, 12)
    for look in range(counts.shape[1]):
        np.testing.assert_array_equal(sums[:, look], counts[:, max(0, look - 11) : look + 1].sum(axis=1))
