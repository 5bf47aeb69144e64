"""The sliding window under the `direct` provider: counter deltas, restarts, quantiles, edges, memory."""

import math
import re

import pytest

from gateway.metrics.window import WindowStore, counter_increase, histogram_quantile, series_key

INF = math.inf


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def rq(cluster: str, code: str | None = None):
    labels = {"envoy_cluster_name": cluster} | ({"envoy_response_code": code} if code else {})
    return series_key("envoy_cluster_upstream_rq_total", labels)


def scrape_every(store: WindowStore, clock: FakeClock, step: float, scrapes: list[dict]) -> None:
    for scrape in scrapes:
        store.record(scrape)
        clock.now += step
    clock.now -= step  # "now" is the last scrape


def test_a_counter_delta_is_last_minus_first_within_the_window(clock):
    store = WindowStore(clock, retention=60)
    key = rq("baseline")
    scrape_every(store, clock, 5, [{key: v} for v in (100, 110, 130, 160)])
    assert store.delta(key, 60) == 60
    assert store.delta(key, 10) == 50  # samples at now-10, now-5, now: 110 -> 160
    assert store.delta(key, 9.9) == 30  # the sample at exactly now-10 is outside


def test_a_restart_counts_from_the_new_value():
    assert counter_increase([100, 110, 4, 9]) == 10 + 4 + 5
    assert counter_increase([50, 0, 0, 3]) == 3
    assert counter_increase([7]) == 0
    assert counter_increase([]) == 0


def test_a_restart_inside_the_window(clock):
    store = WindowStore(clock, retention=60)
    key = rq("zero-layer")
    scrape_every(store, clock, 5, [{key: v} for v in (500, 520, 3, 10)])
    assert store.delta(key, 60) == 20 + 3 + 7


def test_a_series_created_after_the_first_scrape_counts_from_zero(clock):
    """Envoy creates `envoy_response_code="503"` on the first 503: all of its value is new."""
    store = WindowStore(clock, retention=60)
    ok, failed = rq("zero-layer-with-fallback", "200"), rq("zero-layer-with-fallback", "503")
    scrape_every(store, clock, 5, [{ok: 10}, {ok: 12, failed: 7}, {ok: 12, failed: 9}])
    assert store.delta(failed, 60) == 9
    assert store.delta(ok, 60) == 2


def test_a_series_in_the_first_scrape_is_history_not_increase(clock):
    store = WindowStore(clock, retention=60)
    key = rq("baseline")
    store.record({key: 4000})
    assert store.delta(key, 60) == 0


def test_increase_sums_matching_series_with_promql_label_matching(clock):
    store = WindowStore(clock, retention=60)
    total, ok, failed, gw = (
        rq("zero-layer"),
        rq("zero-layer", "200"),
        rq("zero-layer", "503"),
        rq("zero-layer", "504"),
    )
    other = rq("baseline", "503")
    scrape_every(
        store,
        clock,
        5,
        [{total: 0, ok: 0, failed: 0, gw: 0, other: 0}, {total: 30, ok: 20, failed: 6, gw: 4, other: 50}],
    )
    five_xx = re.compile(r"5\d\d")
    name = "envoy_cluster_upstream_rq_total"
    assert (
        store.increase(name, {"envoy_cluster_name": "zero-layer", "envoy_response_code": five_xx}, 60) == 10
    )
    # "" matches an absent label: the attempts counter, not the per-code ones that share its name
    assert store.increase(name, {"envoy_cluster_name": "zero-layer", "envoy_response_code": ""}, 60) == 30
    assert store.increase(name, {"envoy_response_code": "503"}, 60) == 56
    assert store.increase("no_such_family", {}, 60) == 0


def test_histogram_quantile_interpolates_within_the_bucket():
    buckets = {0.1: 10, 0.5: 60, 1.0: 90, 2.0: 100, INF: 100}
    # rank 50 of 100 lies in (0.1, 0.5], 40 of its 50: 0.1 + 0.4 * 40/50
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.42)
    # rank 95: in (1, 2], 5 of its 10
    assert histogram_quantile(0.95, buckets) == pytest.approx(1.5)
    # rank 99: 9 of 10 into (1, 2]
    assert histogram_quantile(0.99, buckets) == pytest.approx(1.9)
    # rank 5 in the first bucket, which starts at 0
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.05)
    # rank on a bucket's edge answers that edge
    assert histogram_quantile(0.6, buckets) == pytest.approx(0.5)


def test_histogram_quantile_in_the_inf_bucket_answers_the_highest_finite_bound():
    assert histogram_quantile(0.99, {1.0: 50, 5.0: 90, INF: 100}) == 5.0


def test_histogram_quantile_without_data_is_none():
    assert histogram_quantile(0.99, {1.0: 0, INF: 0}) is None
    assert histogram_quantile(0.99, {1.0: 3, 2.0: 4}) is None  # no +Inf bucket
    assert histogram_quantile(0.99, {INF: 4}) is None
    assert histogram_quantile(0.99, {}) is None
    with pytest.raises(ValueError, match="quantile"):
        histogram_quantile(1.5, {1.0: 1, INF: 1})


def test_histogram_quantile_repairs_buckets_that_dip():
    """Separately reset bucket series can give non-cumulative deltas; Prometheus takes a running max."""
    assert histogram_quantile(0.75, {1.0: 10, 2.0: 8, 4.0: 20, INF: 20}) == pytest.approx(3.0)


def bucket(le: str, **labels: str):
    return series_key(
        "envoy_cluster_upstream_rq_time_bucket", {"envoy_cluster_name": "baseline", "le": le} | labels
    )


def test_quantile_over_window_deltas_of_bucket_series(clock):
    """Old observations (before the window) must not weigh on the quantile."""
    store = WindowStore(clock, retention=120)
    les = ("5", "10", "25", "+Inf")
    before = dict.fromkeys((bucket(le) for le in les), 1000.0)  # 1000 fast requests, long ago
    store.record(before)
    clock.now += 60
    start = dict(before)
    store.record(start)
    clock.now += 30
    # in the last 30 s: 100 requests, 20 under 5 ms, 80 more under 25 ms
    store.record({bucket("5"): 1020, bucket("10"): 1020, bucket("25"): 1100, bucket("+Inf"): 1100})
    # rank 99 of 100 lies in (10, 25], 79 of its 80
    assert store.quantile(0.99, "envoy_cluster_upstream_rq_time_bucket", {}, 30) == pytest.approx(
        10 + 15 * 79 / 80
    )
    assert store.quantile(0.99, "envoy_cluster_upstream_rq_time_bucket", {}, 10) is None  # one sample


def test_quantile_sums_series_by_le_across_other_labels(clock):
    store = WindowStore(clock, retention=60)
    keys = [bucket(le, instance=i) for i in ("a", "b") for le in ("1", "+Inf")]
    store.record(dict.fromkeys(keys, 0.0))
    clock.now += 5
    a1, a_inf, b1, b_inf = keys
    store.record({a1: 10, a_inf: 10, b1: 0, b_inf: 10})  # a: 10 under 1; b: 10 above 1
    assert store.quantile(0.5, "envoy_cluster_upstream_rq_time_bucket", {}, 60) == pytest.approx(1.0)
    assert store.quantile(0.25, "envoy_cluster_upstream_rq_time_bucket", {}, 60) == pytest.approx(0.5)
    assert store.quantile(0.5, "envoy_cluster_upstream_rq_time_bucket", {"instance": "b"}, 60) == 1.0


def test_memory_is_bounded_by_the_retention(clock):
    store = WindowStore(clock, retention=30)
    key = rq("baseline")
    for value in range(1000):
        store.record({key: value})
        clock.now += 5
    clock.now -= 5  # "now" is the last scrape
    assert store.sample_count() == 7  # samples at now-30 .. now
    assert store.delta(key, 30) == 6


def test_a_series_gone_for_longer_than_the_retention_is_forgotten(clock):
    store = WindowStore(clock, retention=30)
    gone, kept = rq("old-pod"), rq("baseline")
    store.record({gone: 5, kept: 1})
    for _ in range(10):
        clock.now += 5
        store.record({kept: 1})
    assert store.sample_count() == 7
    assert store.increase("envoy_cluster_upstream_rq_total", {"envoy_cluster_name": "old-pod"}, 30) == 0
