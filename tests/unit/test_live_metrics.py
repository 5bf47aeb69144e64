"""The live view's numbers, from the real model server's and probe's metric families (so a renamed family
breaks this test, not the demo's screen)."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from graystack.console.live_metrics import bucket_quantile, parse_counters, probe_weight_status, window_stats
from inference.server.telemetry import ServerMetrics
from inference.weights import WeightStatus
from probes.telemetry import ProbeMetrics


def scrape(metrics: ServerMetrics, at: float):
    return parse_counters(generate_latest(metrics.registry).decode(), at)


def test_rate_error_rate_and_ttft_p95_come_from_the_difference_between_two_scrapes():
    metrics = ServerMetrics("zero-layer", "tiny")
    for _ in range(50):
        metrics.count(200)
    before = scrape(metrics, at=100.0)
    for _ in range(90):
        metrics.count(200)
    for _ in range(10):
        metrics.count(500)
    for _ in range(100):
        metrics.ttft.labels("zero-layer", "default", "0-16").observe(
            0.05
        )  # between the 0.0435 and 0.0522 edges
    stats = window_stats(before, scrape(metrics, at=105.0), "ERASED")
    assert stats.rate == pytest.approx(20.0)
    assert stats.error_rate == pytest.approx(0.1)
    assert 0.0434 < stats.ttft_p95 <= 0.0522
    assert stats.weight_status == "ERASED"


def test_a_restarted_server_counts_from_zero_not_negative():
    old = ServerMetrics("baseline", "tiny")
    for _ in range(500):
        old.count(200)
    fresh = ServerMetrics("baseline", "tiny")
    for _ in range(10):
        fresh.count(200)
    stats = window_stats(scrape(old, 0.0), scrape(fresh, 2.0), "-")
    assert stats.rate == pytest.approx(5.0)
    assert stats.error_rate == 0


def test_no_requests_means_no_error_rate_and_no_ttft():
    metrics = ServerMetrics("baseline", "tiny")
    stats = window_stats(scrape(metrics, 0.0), scrape(metrics, 5.0), "-")
    assert (stats.rate, stats.error_rate, stats.ttft_p95) == (0.0, None, None)


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ([(0.1, 50.0), (0.2, 100.0), (float("inf"), 100.0)], 0.19),  # linear within the bucket
        ([(0.1, 0.0), (float("inf"), 10.0)], 0.1),  # beyond the last bound: that bound
        ([(0.1, 0.0), (float("inf"), 0.0)], None),
    ],
)
def test_bucket_quantile_reads_like_promql_histogram_quantile(buckets, expected):
    assert bucket_quantile(0.95, buckets) == (pytest.approx(expected) if expected is not None else None)


def test_the_probe_reports_the_status_it_found():
    probe = ProbeMetrics()
    probe.set_status("zero-layer", WeightStatus.ERASED)
    assert probe_weight_status(generate_latest(probe.registry).decode()) == "ERASED"
