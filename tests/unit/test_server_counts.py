"""The model servers' request counters as the split proof's evidence (gateway/gatewayapi/server_counts.py):
read from the metrics text whatever labels split them, counted from each endpoint's first reading, and a
restarted server (its counter back near zero) counted from zero, never negative."""

from __future__ import annotations

import pytest

from gateway.gatewayapi.server_counts import requests_counted, taken_since

VLLM = """# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 120.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 30.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e9
"""


def test_a_counter_is_summed_over_its_labels_and_a_missing_one_is_named():
    assert requests_counted(VLLM, "vllm:request_success_total") == 150.0
    assert requests_counted(VLLM, "vllm:request_success") == 150.0
    with pytest.raises(ValueError, match="no 'graystack_requests_total'"):
        requests_counted(VLLM, "graystack_requests_total")


def test_requests_are_counted_from_each_endpoints_first_reading_and_a_restart_from_zero():
    variants = {"a1": "stable", "a2": "stable", "b1": "canary"}
    taken, kept = taken_since({}, {"a1": 100.0, "b1": 7.0}, variants)
    assert taken == {}  # first readings: the start
    taken, kept = taken_since(kept, {"a1": 190.0, "a2": 50.0, "b1": 12.0}, variants)
    assert taken == {"stable": 90, "canary": 5}  # a2 is new: counted from its next reading
    taken, _ = taken_since(kept, {"a1": 200.0, "a2": 60.0, "b1": 3.0}, variants)
    assert taken == {"stable": 20, "canary": 3}  # b1 restarted: its 3 since
