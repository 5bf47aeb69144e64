"""The prometheus provider's queries (templates, overrides, the spec's check of them) and how it reads
Prometheus' answers, against canned answers: each series is its own counter, told apart by its labels;
no data is no entry; a failed query is an error naming it."""

from __future__ import annotations

import asyncio
import functools
import math
import re

import httpx
import pytest

from gateway.metrics import prometheus
from gateway.metrics.observations import ERRORS, REQUESTS, TTFT, CounterKey
from gateway.metrics.prometheus import PrometheusProvider
from gateway.metrics.queries import SIGNALS, render
from gateway.spec.model import SpecError, validate_spec
from gateway.spec.queries import QUERIES, check_overrides

VARIANTS = ["baseline", "zero-layer"]
PROVIDER = PrometheusProvider("http://p:9090", VARIANTS, "baseline")


def spec_with(provider: dict) -> dict:
    return {
        "name": "zero-layer",
        "variants": {
            "baseline": {"endpoints": ["127.0.0.1:8001"]},
            "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
        },
        "routing": {"weights": {"baseline": 100}},
        "analysis": {"provider": provider},
    }


def test_placeholders_are_filled_and_promql_braces_left_alone():
    assert PROVIDER.promql("retried", "zero-layer") == (
        'envoy_cluster_upstream_rq_retry{envoy_cluster_name="zero-layer-with-fallback"}'
    )
    assert PROVIDER.promql("attempts", "zero-layer") == (
        'envoy_cluster_upstream_rq_total{envoy_cluster_name=~"zero-layer|zero-layer-shadow"}'
    )
    for name, template in QUERIES.items():
        assert not re.search(r"\{\w+\}", render(template, "v", "v")), name


def test_counter_queries_select_raw_series_not_sums_over_a_window():
    for name in SIGNALS:
        assert not re.search(r"\b(sum|increase|rate)\b|\[", QUERIES[name]), name


def test_inter_token_latency_is_read_once_per_request_not_per_token():
    itl = PROVIDER.promql("itl", "zero-layer")
    assert "graystack_request_time_per_output_token_seconds_bucket" in itl
    assert "vllm:request_time_per_output_token_seconds_bucket" in itl
    assert "inter_token" not in itl


def test_a_variant_behind_the_fallback_is_counted_on_its_aggregate_cluster():
    assert "zero-layer-with-fallback" in PROVIDER.promql("failed", "zero-layer")
    assert '"baseline|baseline-shadow"' in PROVIDER.promql("failed", "baseline")
    without = PrometheusProvider("http://p:9090", VARIANTS, None)
    assert '"zero-layer|zero-layer-shadow"' in without.promql("failed", "zero-layer")


def test_with_one_retry_each_failed_attempt_is_asked_for_once_of_the_variant_that_made_it():
    """Behind its fallback aggregate, a variant's failures its fallback rescued (not every retry: a
    fallback that failed too is the baseline's); the baseline's own retries, and the fallbacks that failed
    on the others' behalf. With more retries, every retry is the variant's, as before."""
    asked = {v: {n for n in QUERIES if PROVIDER.asks(n, v)} for v in VARIANTS}
    assert asked["zero-layer"] >= {"rescued", "failed"}
    assert asked["zero-layer"].isdisjoint({"retried", "fallbacks_failed"})
    assert asked["baseline"] >= {"retried", "failed", "fallbacks_failed"}
    assert "rescued" not in asked["baseline"]
    assert PROVIDER.promql("fallbacks_failed", "baseline") == (
        'envoy_cluster_upstream_rq_retry_limit_exceeded{envoy_cluster_name=~"zero-layer-with-fallback"}'
    )
    more = PrometheusProvider("http://p:9090", VARIANTS, "baseline", attempts=2)
    assert {n for n in ("retried", "rescued", "fallbacks_failed") if more.asks(n, "zero-layer")} == {
        "retried"
    }
    assert not more.asks("fallbacks_failed", "baseline")


def test_overrides_replace_built_in_queries_by_name():
    override = 'my_attempts{cluster="{variant}"}'
    provider = PrometheusProvider("http://p:9090", VARIANTS, "baseline", queries={"attempts": override})
    assert provider.promql("attempts", "zero-layer") == 'my_attempts{cluster="zero-layer"}'
    assert provider.promql("retried", "zero-layer") == PROVIDER.promql("retried", "zero-layer")
    spec = validate_spec(
        spec_with({"type": "prometheus", "url": "http://p:9090", "queries": {"attempts": override}})
    )
    assert spec.analysis.provider.queries == {"attempts": override}


def test_an_unknown_query_name_is_refused_naming_it():
    with pytest.raises(ValueError, match="unknown query 'atempts'"):
        check_overrides({"atempts": "x"})
    with pytest.raises(SpecError, match=r"analysis\.provider\.queries: unknown query 'atempts'"):
        validate_spec(spec_with({"type": "prometheus", "url": "http://p:9090", "queries": {"atempts": "x"}}))
    with pytest.raises(ValueError, match="unknown query 'atempts'"):
        PrometheusProvider("http://p:9090", VARIANTS, "baseline", queries={"atempts": "x"})


def test_an_unknown_placeholder_is_refused_naming_the_query():
    with pytest.raises(SpecError, match=r"query 'failed': unknown placeholder\(s\) \['varaint'\]"):
        validate_spec(spec_with({"type": "prometheus", "queries": {"failed": 'x{v="{varaint}"}'}}))


def test_a_window_placeholder_is_refused_naming_the_query():
    """The analysis takes increments between looks: an override still summing over a window would
    hand it rates it would difference again."""
    with pytest.raises(SpecError, match=r"query 'ttft': `\{window\}` is no longer filled in"):
        validate_spec(
            spec_with(
                {"type": "prometheus", "queries": {"ttft": 'sum(increase(x{v="{variant}"}[{window}]))'}}
            )
        )


def series(*found: tuple[dict[str, str], float]) -> dict:
    """Prometheus' answer holding these series (labels, value)."""
    result = [{"metric": labels, "value": [0, str(value)]} for labels, value in found]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def observe(monkeypatch, answer, queries=None):
    """The provider's observations, each query answered by `answer(name, variant)` (a status and a body)."""
    provider = PrometheusProvider("http://p:9090", VARIANTS, "baseline", queries=queries)
    by_promql = {provider.promql(name, v): (name, v) for v in VARIANTS for name in provider.queries}

    def handler(request: httpx.Request) -> httpx.Response:
        status, body = answer(*by_promql[request.url.params["query"]])
        return (
            httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)
        )

    transport = httpx.MockTransport(handler)
    monkeypatch.setattr(
        prometheus.httpx, "AsyncClient", functools.partial(httpx.AsyncClient, transport=transport)
    )
    return asyncio.run(provider.observe())


ENVOY_A = {"instance": "envoy-a:9901", "job": "envoy"}
ENVOY_B = {"instance": "envoy-b:9901", "job": "envoy"}


def test_each_series_is_its_own_counter_named_by_its_labels(monkeypatch):
    rq_total = {"__name__": "envoy_cluster_upstream_rq_total", "envoy_cluster_name": "zero-layer"}
    rescued = {
        "__name__": "envoy_cluster_upstream_rq_retry_success",
        "envoy_cluster_name": "zero-layer-with-fallback",
    }
    bucket = {"__name__": "graystack_request_ttft_seconds_bucket", "variant": "zero-layer"}
    answers = {
        ("zero-layer", "attempts"): series(({**rq_total, **ENVOY_A}, 120), ({**rq_total, **ENVOY_B}, 30)),
        ("zero-layer", "rescued"): series(({**rescued, **ENVOY_A}, 100), ({**rescued, **ENVOY_B}, 40)),
        ("zero-layer", "ttft"): series(
            ({**bucket, "prompt_bucket": "0-128", "le": "2.0", "instance": "pod-a:8002"}, 7),
            ({**bucket, "prompt_bucket": "0-128", "le": "+Inf", "instance": "pod-a:8002"}, 9),
        ),
        ("zero-layer", "weight_status"): series(
            ({"status": "ZEROED", "instance": "b:9101"}, 1), ({"status": "ERASED", "instance": "a:9101"}, 1)
        ),
    }
    seen = observe(monkeypatch, lambda name, variant: (200, answers.get((variant, name), series())))
    assert seen.error is None
    a_source = (
        'envoy_cluster_upstream_rq_total{envoy_cluster_name="zero-layer",instance="envoy-a:9901",job="envoy"}'
    )
    pod_a = 'instance="pod-a:8002",le="2.0",prompt_bucket="0-128",variant="zero-layer"'
    assert seen.counters[CounterKey("zero-layer", REQUESTS, source=a_source)] == 120
    assert (
        seen.counters[
            CounterKey(
                "zero-layer",
                TTFT,
                "*|0-128",
                2.0,
                f"graystack_request_ttft_seconds_bucket{{{pod_a}}}",
                "pod-a:8002",  # the pod: latency is compared at a like load per pod
            )
        ]
        == 7
    )
    by_signal = {
        (key.signal, key.le): sorted(
            v for k, v in seen.counters.items() if (k.signal, k.le) == (key.signal, key.le)
        )
        for key in seen.counters
    }
    # Two Envoy replicas: two entries each, never summed.
    assert by_signal == {
        (REQUESTS, math.inf): [30, 120],
        (ERRORS, math.inf): [40, 100],
        (TTFT, 2.0): [7],
        (TTFT, math.inf): [9],
    }
    assert {key.variant for key in seen.counters} == {"zero-layer"}  # baseline: no data, no entry
    assert seen.weight_status == {"zero-layer": ["ERASED", "ZEROED"]}  # by instance; baseline: no data


def test_a_query_prometheus_refuses_is_an_error_naming_it(monkeypatch):
    refused = {
        "status": "error",
        "errorType": "bad_data",
        "error": "1:5: parse error: unclosed left parenthesis",
    }

    def answer(name, variant):
        return (400, refused) if (name, variant) == ("failed", "zero-layer") else (200, series())

    seen = observe(monkeypatch, answer)
    assert seen.counters == {}
    assert "prometheus query 'failed' for zero-layer" in seen.error
    assert "HTTP 400: bad_data: 1:5: parse error" in seen.error
    assert "more" not in seen.error  # the one query that failed


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (502, "<html>bad gateway</html>", "HTTP 502"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "not an instant vector"),
        (
            200,
            {"status": "success", "data": {"resultType": "scalar", "result": [0, "3"]}},
            "not an instant vector",
        ),
        (200, series(({"instance": "a"}, math.inf)), "not a count"),
        (200, series(({"instance": "a"}, -1)), "not a count"),
    ],
)
def test_an_answer_that_is_not_series_of_counts_is_an_error_naming_the_query(
    monkeypatch, status, body, reason
):
    seen = observe(
        monkeypatch, lambda name, variant: (status, body) if name == "attempts" else (200, series())
    )
    assert "prometheus query 'attempts'" in seen.error
    assert reason in seen.error
    assert "(and 1 more failed)" in seen.error  # one per variant
    assert seen.counters == {}


def test_an_override_that_sums_the_series_away_is_an_error(monkeypatch):
    """`sum()` drops the metric name and labels: two queries' sums would be one series, so the
    provider refuses rather than lose one."""
    queries = {"attempts": 'sum(a{c="{variant}"})', "refused": 'sum(b{c="{variant}"})'}
    seen = observe(
        monkeypatch,
        lambda name, variant: (200, series(({}, 3)) if name in queries else series()),
        queries,
    )
    assert re.search(r"prometheus query '(attempts|refused)' for \S+ .* answered \{\} twice", seen.error)


def test_a_bucket_override_must_keep_the_le_label(monkeypatch):
    queries = {"ttft": 'sum by (variant) (x_bucket{variant="{variant}"})'}
    seen = observe(
        monkeypatch,
        lambda name, variant: (200, series(({"variant": variant}, 1)) if name == "ttft" else series()),
        queries,
    )
    assert "prometheus query 'ttft'" in seen.error
    assert "without an `le` label" in seen.error


def test_a_weight_status_override_must_keep_the_status_label(monkeypatch):
    queries = {"weight_status": 'count by (variant) (graystack_probe_weight_status{variant="{variant}"})'}
    seen = observe(
        monkeypatch,
        lambda name, variant: (200, series(({}, 1)) if name == "weight_status" else series()),
        queries,
    )
    assert "without a `status` label" in seen.error


def test_effective_windows_are_read_from_the_model_servers_info_series(monkeypatch):
    assert (
        PROVIDER.promql("effective_window", "zero-layer") == 'graystack_model_info{variant="zero-layer"} == 1'
    )
    info = {"__name__": "graystack_model_info", "variant": "zero-layer", "weight_status": "ACTIVE"}
    answers = {
        ("zero-layer", "effective_window"): series(
            ({**info, "effective_window": "128", "instance": "b:8002"}, 1),
            ({**info, "effective_window": "64", "instance": "a:8002"}, 1),
        ),
    }
    seen = observe(monkeypatch, lambda name, variant: (200, answers.get((variant, name), series())))
    assert seen.error is None
    assert seen.effective_windows == {"zero-layer": [64, 128]}  # by instance; baseline: no data
    assert seen.counters == {}  # an info series is not a counter


def test_probes_mismatches_are_read_by_reason_and_a_reason_is_required(monkeypatch):
    assert PROVIDER.promql("server_mismatch", "zero-layer") == (
        'graystack_probe_server_mismatch{variant="zero-layer"} == 1'
    )
    reason = "the file is ERASED sha256:fedcba9876543210, the server loaded ACTIVE sha256:0123456789abcdef"
    mismatch = {"__name__": "graystack_probe_server_mismatch", "variant": "zero-layer"}
    answers = {
        ("zero-layer", "server_mismatch"): series(
            ({**mismatch, "reason": reason, "instance": "b:9101"}, 1),
            ({**mismatch, "reason": "the server echoes system_fingerprint ''", "instance": "a:9101"}, 1),
        ),
    }
    seen = observe(monkeypatch, lambda name, variant: (200, answers.get((variant, name), series())))
    assert seen.error is None
    assert seen.mismatches == {"zero-layer": ["the server echoes system_fingerprint ''", reason]}
    assert seen.counters == {}  # not a counter

    summed = {"server_mismatch": 'count by (variant) (graystack_probe_server_mismatch{variant="{variant}"})'}
    seen = observe(
        monkeypatch,
        lambda name, variant: (200, series(({}, 1)) if name == "server_mismatch" else series()),
        summed,
    )
    assert "without a `reason` label" in seen.error
