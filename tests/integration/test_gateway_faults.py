"""`graystack fault`, through the real gateway and the real Envoy, in front of stand-in upstreams (not
graystack's model server): the fault is Envoy's, per attempt, so the fallback retry hides it from clients
and the variant's cluster stats count it as they count a real failing variant."""

from __future__ import annotations

import time

import pytest

from graystack.local.gateway_stack import GatewayStack
from tests.support.stacks import envoy_stats, running, set_upstream, upstream_answers, variant_counts

TO_ZERO_LAYER = {"X-Client-Type": "high_load"}  # the spec's rule: this segment goes wholly to zero-layer


@pytest.fixture(scope="module")
def stack(tmp_path_factory, envoy_binary):
    """Without outlier detection, which would eject a variant failing every attempt (as it would a real
    one) and leave it out of the tests that follow."""
    for started in running(GatewayStack(tmp_path_factory.mktemp("faults"), envoy_binary)):
        generation = started.status()["generation"]
        started.write_spec({**started.spec, "outlier_detection": None})
        started.wait_converged(generation_above=generation)
        yield started


@pytest.fixture(autouse=True)
def cleared(stack):
    yield
    stack.cli("fault", "zero-layer", "--clear")
    set_upstream(stack, "zero-layer", "ok")


COUNTED = [
    ("zero-layer", "upstream_rq_total"),  # the analysis' attempts on the variant
    ("zero-layer", "upstream_rq_503"),
    ("zero-layer-with-fallback", "upstream_rq_retry"),  # its failed attempts, retried on the baseline
    ("zero-layer-with-fallback", "upstream_rq_200"),  # what the clients got
]


def stat(stack: GatewayStack, cluster: str, name: str) -> int:
    return envoy_stats(stack).get(f"cluster.{cluster}.{name}", 0)


def counted(stack: GatewayStack) -> dict[tuple[str, str], int]:
    stats = envoy_stats(stack)
    return {(cluster, name): stats.get(f"cluster.{cluster}.{name}", 0) for cluster, name in COUNTED}


def counted_while(stack: GatewayStack, n: int) -> dict[tuple[str, str], int]:
    """What Envoy counts while `n` requests go to zero-layer; each must reach the client as a 200."""
    before = counted(stack)
    assert variant_counts(stack, n, TO_ZERO_LAYER) == {"baseline": n, "zero-layer": 0}
    return {key: value - before[key] for key, value in counted(stack).items()}


def test_a_fault_on_every_attempt_is_counted_as_a_real_failing_variant_and_falls_back_unseen(stack):
    set_upstream(stack, "zero-layer", "fail")  # the stand-in itself answers 503
    real = counted_while(stack, 40)
    set_upstream(stack, "zero-layer", "ok")
    served_by_stand_in = upstream_answers(stack, "zero-layer")

    said = stack.cli("fault", "zero-layer", "--error-rate", "1.0")
    assert said.startswith("zero-layer: fails 100.0% of attempts with 503 (ACKed by every proxy")
    injected = counted_while(stack, 40)

    assert injected == real
    assert injected[("zero-layer", "upstream_rq_total")] == 40
    assert injected[("zero-layer-with-fallback", "upstream_rq_retry")] == 40
    assert upstream_answers(stack, "zero-layer") == served_by_stand_in  # Envoy failed them, not the server

    assert stack.status()["faults"]["zero-layer"]["error_rate"] == 1.0
    assert "FAULT     zero-layer fails 100.0% of attempts with 503" in stack.cli("status")


def test_half_the_attempts_fail_without_a_fallback_and_clear_restores_the_variant(stack):
    spec = stack.spec
    no_fallback = {**spec, "retries": {"on": "5xx", "attempts": 0}}
    generation = stack.status()["generation"]
    stack.write_spec(no_fallback)
    stack.wait_converged(generation_above=generation)
    try:
        stack.cli("fault", "zero-layer", "--error-rate", "0.5", "--status", "500")
        before = stat(stack, "zero-layer", "upstream_rq_500")
        codes = [stack.request(TO_ZERO_LAYER).status_code for _ in range(300)]
        failed = codes.count(500)
        assert set(codes) == {200, 500}
        assert 105 <= failed <= 195, failed  # Binomial(300, 0.5): mean 150, sd 8.7; this is +-5 sd
        assert stat(stack, "zero-layer", "upstream_rq_500") - before == failed  # each one an attempt's

        assert stack.cli("fault", "zero-layer", "--clear").startswith("zero-layer: no fault (ACKed")
        assert variant_counts(stack, 50, TO_ZERO_LAYER) == {"baseline": 0, "zero-layer": 50}
        assert stack.status()["faults"] == {}
    finally:
        generation = stack.status()["generation"]
        stack.write_spec(spec)
        stack.wait_converged(generation_above=generation)


def timed(stack: GatewayStack, headers: dict | None = None) -> tuple[float, str]:
    started = time.monotonic()
    response = stack.request(headers)
    assert response.status_code == 200, response.text
    return time.monotonic() - started, response.headers["x-graystack-variant"]


def test_latency_slows_that_variant_only_and_past_first_byte_it_falls_back(stack):
    stack.cli("fault", "zero-layer", "--latency-ms", "300")
    slow = [timed(stack, TO_ZERO_LAYER) for _ in range(5)]
    fast = [timed(stack) for _ in range(5)]  # the default split: all baseline
    # Envoy's timers run on its dispatcher's cached clock and may fire a few ms early:
    # 0.2995 s was seen for 300 ms, 0.998 s for a 1 s timeout. The bounds below keep 5 % slack.
    assert all(seconds >= 0.285 and variant == "zero-layer" for seconds, variant in slow), slow
    assert all(seconds < 0.15 and variant == "baseline" for seconds, variant in fast), fast

    # Past the spec's first_byte (1 s), the attempt is cut as a stalled pod's would be, and retried.
    stack.cli("fault", "zero-layer", "--latency-ms", "1500")
    before = stat(stack, "zero-layer-with-fallback", "upstream_rq_per_try_idle_timeout")
    cut = [timed(stack, TO_ZERO_LAYER) for _ in range(3)]
    assert all(0.95 <= seconds < 1.45 and variant == "baseline" for seconds, variant in cut), cut
    assert stat(stack, "zero-layer-with-fallback", "upstream_rq_per_try_idle_timeout") - before == 3
