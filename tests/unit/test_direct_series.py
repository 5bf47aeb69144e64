"""The direct provider's reading of scraped pages, against canned ones: each series is its own entry
under the signal its cluster and labels say (gateway/metrics/direct.py), named by its target; an
unreadable page or series is an error naming it, never an exception."""

from __future__ import annotations

import asyncio
import functools
import math

import httpx
from prometheus_client import generate_latest

from gateway.metrics import direct
from gateway.metrics.direct import DirectProvider
from gateway.metrics.observations import ERRORS, REQUESTS, TTFT, stratum
from probes.loaded import Comparison
from probes.telemetry import ProbeMetrics

ENVOY = "http://envoy:9901"
POD = "http://pod-a:8002/metrics"
ENVOY_PAGE = """\
# TYPE envoy_cluster_upstream_rq_total counter
envoy_cluster_upstream_rq_total{envoy_cluster_name="zero-layer"} 7
envoy_cluster_upstream_rq_total{envoy_cluster_name="zero-layer-shadow"} 4
envoy_cluster_upstream_rq_total{envoy_cluster_name="zero-layer-with-fallback"} 9
envoy_cluster_upstream_rq_total{envoy_cluster_name="baseline"} 20
# TYPE envoy_cluster_upstream_rq counter
envoy_cluster_upstream_rq{envoy_response_code="503",envoy_cluster_name="zero-layer-with-fallback"} 2
envoy_cluster_upstream_rq{envoy_response_code="503",envoy_cluster_name="zero-layer"} 5
envoy_cluster_upstream_rq{envoy_response_code="200",envoy_cluster_name="zero-layer-shadow"} 3
envoy_cluster_upstream_rq{envoy_response_code="503",envoy_cluster_name="zero-layer-shadow"} 1
# TYPE envoy_cluster_upstream_rq_retry counter
envoy_cluster_upstream_rq_retry{envoy_cluster_name="zero-layer-with-fallback"} 6
envoy_cluster_upstream_rq_retry{envoy_cluster_name="zero-layer"} 99
# TYPE envoy_cluster_upstream_rq_retry_success counter
envoy_cluster_upstream_rq_retry_success{envoy_cluster_name="zero-layer-with-fallback"} 4
envoy_cluster_upstream_rq_retry_success{envoy_cluster_name="baseline"} 8
# TYPE envoy_cluster_upstream_rq_retry_limit_exceeded counter
envoy_cluster_upstream_rq_retry_limit_exceeded{envoy_cluster_name="zero-layer-with-fallback"} 2
envoy_cluster_upstream_rq_retry_limit_exceeded{envoy_cluster_name="baseline"} 3
"""


def pod_page(le: str) -> str:
    return f"""\
# TYPE graystack_request_ttft_seconds histogram
graystack_request_ttft_seconds_bucket{{variant="zero-layer",prompt_bucket="0-128",le="{le}"}} 3
graystack_request_ttft_seconds_bucket{{variant="zero-layer",prompt_bucket="0-128",le="+Inf"}} 4
graystack_request_ttft_seconds_count{{variant="zero-layer",prompt_bucket="0-128"}} 4
graystack_request_ttft_seconds_sum{{variant="zero-layer",prompt_bucket="0-128"}} 1.5
"""


def observe(monkeypatch, pages: dict[str, str], pods: tuple[str, ...] = (POD,), attempts: int = 1):
    def handler(request: httpx.Request) -> httpx.Response:
        url = str(request.url.copy_with(query=None))
        return httpx.Response(200, text=pages[url]) if url in pages else httpx.Response(404)

    transport = httpx.MockTransport(handler)
    monkeypatch.setattr(
        direct.httpx, "AsyncClient", functools.partial(httpx.AsyncClient, transport=transport)
    )
    provider = DirectProvider(
        ENVOY, list(pods), ["baseline", "zero-layer"], fallback="baseline", attempts=attempts
    )
    return asyncio.run(provider.observe())


def test_each_series_counts_once_for_its_variant_and_names_its_target(monkeypatch):
    seen = observe(monkeypatch, {f"{ENVOY}/stats/prometheus": ENVOY_PAGE, POD: pod_page("2.0")})
    assert seen.error is None

    def values(variant: str, signal: str) -> list[float]:
        return counted(seen, variant, signal)

    # Attempts on its own and its shadow cluster (not the aggregate's: they are the baseline's too).
    assert values("zero-layer", REQUESTS) == [4, 7]
    # Each failed attempt once, to the variant that made it: its failures the fallback rescued, and the
    # 5xx of its route and shadow clusters (not its own cluster's 5xx, which those already count) ...
    assert values("zero-layer", ERRORS) == [1, 2, 4]
    assert values("baseline", REQUESTS) == [20]
    # ... and the fallbacks that failed on its behalf, the baseline's (not the baseline's own route's)
    assert values("baseline", ERRORS) == [2]
    ttft = {(k.stratum, k.le): v for k, v in seen.counters.items() if k.signal == TTFT}
    assert ttft == {("*|0-128", 2.0): 3, ("*|0-128", math.inf): 4}  # no `segment` label: "*"
    assert all(f'instance="{POD}"' in k.source for k in seen.counters if k.signal == TTFT)
    assert all(
        f'instance="{ENVOY}/stats/prometheus"' in k.source for k in seen.counters if k.signal == REQUESTS
    )


def test_with_more_retries_every_retry_and_final_failure_is_the_variants(monkeypatch):
    """With two retries or more a request's attempts alternate between the variant and its fallback:
    each retry, and each failure the client saw, is charged to the variant (capped at its attempts)."""
    pages = {f"{ENVOY}/stats/prometheus": ENVOY_PAGE, POD: pod_page("2.0")}
    seen = observe(monkeypatch, pages, attempts=2)
    assert counted(seen, "zero-layer", ERRORS) == [1, 2, 6]
    assert counted(seen, "baseline", ERRORS) == []


def counted(seen, variant: str, signal: str) -> list[float]:
    return sorted(v for k, v in seen.counters.items() if (k.variant, k.signal) == (variant, signal))


def test_an_unreadable_series_or_a_missing_target_is_an_error_naming_it(monkeypatch):
    seen = observe(monkeypatch, {f"{ENVOY}/stats/prometheus": ENVOY_PAGE, POD: pod_page("two")})
    assert seen.counters == {}
    assert "graystack_request_ttft_seconds_bucket{" in seen.error
    assert "`le` is not a number" in seen.error

    seen = observe(monkeypatch, {f"{ENVOY}/stats/prometheus": ENVOY_PAGE})
    assert seen.counters == {}
    assert f"scrape of {POD} failed" in seen.error
    assert "404" in seen.error


VLLM = "http://vllm-pod:8000/metrics"
VLLM_PAGE = """\
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="tiny"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 6.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 6.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 1.25
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
"""


def test_a_vllm_pods_histograms_are_the_variant_its_target_names(monkeypatch):
    """vLLM labels its series with its model name, not the rollout's variant: `NAME=URL` says whose."""
    pages = {f"{ENVOY}/stats/prometheus": ENVOY_PAGE, VLLM: VLLM_PAGE}
    seen = observe(monkeypatch, pages, pods=(f"zero-layer={VLLM}",))
    ttft = {key.le: value for key, value in seen.counters.items() if key.signal == TTFT}
    assert ttft == {0.5: 5.0, math.inf: 6.0}
    assert all(key.variant == "zero-layer" for key in seen.counters if key.signal == TTFT)
    assert {key.stratum for key in seen.counters if key.signal == TTFT} == {stratum(None)}
    unnamed = observe(monkeypatch, pages, pods=(VLLM,))  # no variant label, no name: not anyone's
    assert not [key for key in unnamed.counters if key.signal == TTFT]


def probe_page(variant: str, comparison: Comparison) -> str:
    """A real probe's /metrics after comparing its file with what its server loaded."""
    metrics = ProbeMetrics()
    metrics.show_comparison(variant, comparison)
    return generate_latest(metrics.registry).decode()


def test_probes_finding_their_server_did_not_load_the_checkpoint_are_read_by_reason(monkeypatch):
    reason = "the file is ERASED sha256:fedcba9876543210, the server loaded ACTIVE sha256:0123456789abcdef"
    probes = {
        "http://pod-b:9101/metrics": probe_page("zero-layer", Comparison(False, reason)),
        "http://pod-a:9101/metrics": probe_page("zero-layer", Comparison(True, "the server loaded ...")),
        "http://pod-c:9101/metrics": probe_page("baseline", Comparison(None, "the file is MISSING")),
    }
    seen = observe(monkeypatch, {f"{ENVOY}/stats/prometheus": ENVOY_PAGE, **probes}, tuple(probes))
    assert seen.error is None
    assert seen.mismatches == {"zero-layer": [reason]}  # agreeing (0) and uncompared (absent) are none
