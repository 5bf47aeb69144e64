"""Failures: retries, first-byte timeouts, fallback to the baseline, and a control plane that dies."""

import time

import httpx

from tests.support.processes import kill_hard
from tests.support.stacks import (
    envoy_route_version,
    envoy_stats,
    set_upstream,
    upstream_answers,
    variant_counts,
)


def without_fallback(spec: dict, attempts: int) -> dict:
    spec["retries"] = {"on": "5xx,reset,connect-failure", "attempts": attempts}
    return spec


def flip(stack, spec: dict) -> None:
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def test_an_upstream_that_answers_503_once_is_retried(stack):
    set_upstream(stack, "baseline", "fail-once")
    response = stack.request()
    assert response.status_code == 200
    assert upstream_answers(stack, "baseline") == {"503": 1, "200": 1}
    assert envoy_stats(stack)["cluster.baseline.upstream_rq_retry"] >= 1


def test_an_upstream_that_stalls_past_the_first_byte_timeout_is_cut(stack):
    stall = 10.0
    spec = stack.spec
    spec["routing"]["weights"] = {"baseline": 0, "zero-layer": 100}
    flip(stack, without_fallback(spec, attempts=0))
    set_upstream(stack, "zero-layer", "stall", stall_seconds=stall)
    started = time.monotonic()
    response = stack.request()
    assert response.status_code == 504
    assert time.monotonic() - started < stall  # cut by Envoy, not answered late
    assert envoy_stats(stack)["cluster.zero-layer.upstream_rq_per_try_idle_timeout"] == 1
    # With the baseline as fallback, the stalled attempt is cut and retried there instead.
    spec = stack.spec
    spec["retries"] = {"attempts": 1, "fallback": "baseline"}
    flip(stack, spec)
    started = time.monotonic()
    response = stack.request()
    assert response.status_code == 200
    assert response.headers["x-graystack-variant"] == "baseline"
    assert time.monotonic() - started < stall


def test_a_failing_variant_fails_no_client_yet_every_failure_is_counted(stack):
    """At 50/50 with zero-layer answering 503 to everything, every failed attempt retries on the
    baseline, and Envoy's stats for the zero-layer cluster still show each failure."""
    spec = stack.spec
    spec["outlier_detection"] = None  # so every request keeps reaching the failing variant
    spec["routing"]["weights"] = {"baseline": 50, "zero-layer": 50}
    flip(stack, spec)
    set_upstream(stack, "zero-layer", "fail")
    codes = [stack.request().status_code for _ in range(400)]
    assert codes.count(200) == 400
    failures = upstream_answers(stack, "zero-layer")["503"]
    assert 150 < failures < 250  # about half of the traffic went to the variant first
    stats = envoy_stats(stack)
    assert stats["cluster.zero-layer-with-fallback.retry.upstream_rq_503"] == failures
    assert stats["cluster.zero-layer.upstream_rq_total"] == failures
    assert stats.get("cluster.zero-layer-with-fallback.upstream_rq_503", 0) == 0  # none reached a client


def test_an_ejected_variant_sends_its_share_to_the_baseline(stack):
    """Outlier detection with one host per variant: no panic routing to the ejected host."""
    spec = stack.spec
    spec["routing"]["weights"] = {"baseline": 50, "zero-layer": 50}
    flip(stack, spec)
    set_upstream(stack, "zero-layer", "fail")
    codes = [stack.request().status_code for _ in range(300)]
    assert codes.count(200) == 300
    stats = envoy_stats(stack)
    assert stats["cluster.zero-layer.outlier_detection.ejections_enforced_total"] >= 1
    failures = upstream_answers(stack, "zero-layer")["503"]
    assert failures < 20  # ejected after 5 consecutive 5xx: the rest of its share went to the baseline
    assert stats.get("cluster.zero-layer.lb_healthy_panic", 0) == 0


def test_envoy_keeps_routing_without_the_control_plane_and_converges_when_it_returns(stack):
    stack.cli("weight", "zero-layer=50")
    kill_hard(stack.gateway)
    counts = variant_counts(stack, 300)  # asserts every request succeeded
    assert counts["baseline"] > 75
    assert counts["zero-layer"] > 75
    # The spec changes while the control plane is down; a new one comes up and Envoy converges to it.
    spec = stack.spec
    spec["routing"]["weights"] = {"baseline": 0, "zero-layer": 100}
    stack.write_spec(spec)
    old_version = envoy_route_version(stack)
    stack.start_gateway()
    status = stack.wait_converged(timeout=30)
    new_version = status["xds"]["proxies"][0]["types"]["rds"]["acked"]
    assert new_version != old_version  # versions are unique per control-plane process
    assert envoy_route_version(stack) == new_version
    assert variant_counts(stack, 50) == {"baseline": 0, "zero-layer": 50}
    assert httpx.get(f"http://127.0.0.1:{stack.ports['envoy_admin']}/ready", timeout=5).status_code == 200
