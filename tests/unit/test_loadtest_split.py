"""The split check: requests counted per flip period against the weights live in it, with the requests
near a flip left out, and exact intervals corrected for the number of tests."""

from collections import Counter

import pytest

from loadtests.config import NO_HEADER
from loadtests.split import SplitTracker, Tally, configured_shares, report_bins

ROUTING = {
    "header": "X-Client-Type",
    "rules": [
        {"value": "high_load", "variant": "zero-layer"},
        {"value": "mobile", "weights": {"baseline": 80, "zero-layer": 20}},
    ],
    "weights": {"baseline": 50, "zero-layer": 50},
}


def split(zero_layer: int) -> dict:
    return {**ROUTING, "weights": {"baseline": 100 - zero_layer, "zero-layer": zero_layer}}


def send(tally: Tally, start: float, seconds: float, rate: int, zero_layer_share: float) -> None:
    """`rate` requests a second without a header, `zero_layer_share` of them answered by zero-layer."""
    n = int(seconds * rate)
    for i in range(n):
        variant = "zero-layer" if (i % 100) < zero_layer_share * 100 else "baseline"
        tally.record(start + i / rate, NO_HEADER, variant, failed=False)


def run(flips: list[tuple[float, int]], traffic: list[tuple[float, float, float]], end: float, guard=0.5):
    """Polls every 0.5 s see `flips` ((time, zero-layer %)); `traffic` is (start, seconds, served share)."""
    tracker, tally = SplitTracker(guard=guard, alpha=0.01), Tally()
    for start, seconds, share in traffic:
        send(tally, start, seconds, 40, share)
    t = 0.0
    while t <= end:
        live = [w for at, w in flips if at <= t][-1]
        tracker.observe(t, t + 0.01, split(live))
        t += 0.5
    tracker.add(report_bins(tally.drain()))
    return tracker.result()


def test_each_rule_gives_its_segment_its_own_expected_split():
    expected = {c: configured_shares(ROUTING, c) for c in (NO_HEADER, "mobile", "high_load", "tablet")}
    assert expected == {
        NO_HEADER: {"baseline": 0.5, "zero-layer": 0.5},
        "mobile": {"baseline": 0.8, "zero-layer": 0.2},
        "high_load": {"zero-layer": 1.0},
        "tablet": {"baseline": 0.5, "zero-layer": 0.5},  # no rule: the default split
    }


def test_traffic_that_follows_every_flip_passes_and_each_period_is_checked_against_its_own_weights():
    flips = [(0, 20), (10, 80), (20, 0)]
    result = run(flips, [(1, 9, 0.2), (10, 10, 0.8), (20, 9, 0.0)], end=30)
    assert result.ok
    assert result.periods == 3
    expected = {(c.period, c.variant): c.expected for c in result.checks}
    assert expected[(0, "zero-layer")] == 0.2
    assert expected[(1, "zero-layer")] == 0.8
    assert expected[(2, "zero-layer")] == 0.0
    assert result.excluded > 0  # the requests sent around each flip


def test_a_period_served_with_the_previous_weights_is_caught_even_when_the_run_pools_to_the_right_total():
    # 20 % then 80 % configured, but served 80 % then 20 %: the pooled share is right (50 %), each period wrong.
    result = run([(0, 20), (15, 80)], [(1, 14, 0.8), (15, 14, 0.2)], end=30)
    assert not result.ok
    assert {c.period for c in result.checks if not c.ok} == {0, 1}


def test_a_single_stray_request_fails_a_period_whose_weight_is_zero():
    tracker, tally = SplitTracker(), Tally()
    tracker.observe(0, 0.01, split(0))
    send(tally, 2, 5, 40, 0.0)
    tally.record(4.0, NO_HEADER, "zero-layer", failed=False)
    tracker.observe(10, 10.01, split(0))
    tracker.add(report_bins(tally.drain()))
    (check,) = [c for c in tracker.result().checks if c.variant == "zero-layer"]
    assert (check.observed, check.expected, check.ok) == (1, 0.0, False)


def test_requests_sent_between_the_poll_before_a_flip_and_the_poll_that_saw_it_are_left_out():
    tracker, tally = SplitTracker(guard=0.5), Tally()
    tracker.observe(0, 0.01, split(0))
    tracker.observe(5, 5.01, split(0))
    # the flip happened somewhere in (5, 6]: these zero-layer answers may have met the new split
    for t in (4.7, 5.5, 6.3):
        tally.record(t, NO_HEADER, "zero-layer", failed=False)
    tracker.observe(6, 6.01, split(100))
    tracker.add(report_bins(tally.drain()))
    result = tracker.result()
    assert result.excluded == 3
    assert result.checks == []


def test_bins_wait_for_a_later_poll_so_a_late_flip_can_still_exclude_them():
    tracker, tally = SplitTracker(guard=0.5), Tally()
    tracker.observe(0, 0.01, split(0))
    tally.record(9.9, NO_HEADER, "zero-layer", failed=False)
    tracker.add(report_bins(tally.drain()))  # not settled yet: no poll after 9.9 + guard
    tracker.observe(10.2, 10.21, split(100))
    result = tracker.result()
    assert (result.excluded, result.counted) == (1, 0)


def ended_mid_stream(tally: Tally, flip: float, end: float) -> None:
    """All to zero-layer, then 50/50 from `flip`, served exactly, 40 requests a second; zero-layer
    answers in 0.5 s, baseline in 3 s, and the run stops at `end`: the streams still open then are
    never recorded (Locust kills them)."""
    for i in range(int((end - 0.5) * 40)):
        sent = 0.5 + i / 40
        variant, seconds = ("zero-layer", 0.5) if i % 2 or sent < flip else ("baseline", 3.0)
        tally.start(sent)
        if sent + seconds <= end:
            tally.record(sent, NO_HEADER, variant, failed=False)


@pytest.mark.parametrize("told_what_still_runs", [True, False])
def test_streams_still_open_at_the_end_leave_their_stretch_out_rather_than_tilt_it(told_what_still_runs):
    # CI saw it: after a flip to 50/50 near the end, the last period counted 15 of 15 on the faster
    # variant, because the slower one's requests were still running when the run stopped.
    tracker, tally = SplitTracker(guard=0.5), Tally()
    ended_mid_stream(tally, flip=16.0, end=20.0)
    for t in range(41):
        tracker.observe(t / 2, t / 2 + 0.01, split(100 if t / 2 < 16 else 50))
    report = tally.drain()
    assert report["oldest_running"] == 17.05  # the first baseline request not finished by 20 s
    tracker.add(report_bins(report), report["oldest_running"] if told_what_still_runs else None)
    result = tracker.result()
    if told_what_still_runs:
        assert result.ok, [c for c in result.checks if not c.ok]
        assert result.cut_off == 51  # from 17.0 s (its bin on): one baseline, 50 zero-layer answers
        assert {c.period for c in result.checks} == {0, 1}
    else:  # what the split check did before: the last period looks like a routing fault
        assert not result.ok
        assert {c.period for c in result.checks if not c.ok} == {1}


def test_a_bin_waits_for_every_request_sent_before_it_to_finish():
    tracker, tally = SplitTracker(guard=0.5), Tally()
    tracker.observe(0, 0.01, split(50))
    tally.start(5.0)  # a long stream
    tally.start(6.0)
    tally.record(6.0, NO_HEADER, "zero-layer", failed=False)
    tracker.observe(10, 10.01, split(50))
    report = tally.drain()
    tracker.add(report_bins(report), report["oldest_running"])
    assert tracker.result().counted == 0  # 6.0 is held: the stream sent at 5.0 has not been counted
    tally.record(5.0, NO_HEADER, "baseline", failed=False)
    report = tally.drain()
    assert report["oldest_running"] is None
    tracker.add(report_bins(report), report["oldest_running"])
    result = tracker.result()
    assert (result.counted, result.cut_off) == (2, 0)


def test_an_unreadable_configuration_leaves_its_requests_out():
    tracker, tally = SplitTracker(), Tally()
    tracker.observe(0, 0.01, None)
    send(tally, 1, 5, 40, 0.5)
    tracker.observe(10, 10.01, None)
    tracker.add(report_bins(tally.drain()))
    result = tracker.result()
    assert (result.counted, result.excluded) == (0, 200)


def test_the_family_wise_alpha_is_split_over_the_tests_so_more_periods_widen_each_interval():
    one = run([(0, 50)], [(1, 8, 0.5)], end=10)
    flips = [(10 * i, 50 if i % 2 == 0 else 40) for i in range(8)]
    many = run(flips, [(10 * i + 1, 8, 0.5) for i in range(8)], end=80)
    first, same = one.checks[0], many.checks[0]
    assert (first.period, first.requests) == (same.period, same.requests)
    assert same.upper - same.lower > first.upper - first.lower


@pytest.mark.parametrize("failed", [False, True])
def test_a_drained_tally_survives_json_and_counts_requests_and_failures_per_variant(failed):
    import json

    tally = Tally()
    tally.record(12.34, "mobile", "zero-layer", failed=failed)
    report = json.loads(json.dumps(tally.drain()))
    assert report["requests"] == {"zero-layer": 1}
    assert report["failures"] == {"zero-layer": int(failed)}
    assert report_bins(report) == Counter({(123, "mobile", "zero-layer"): 1})
    assert tally.drain()["bins"] == []
