"""The prometheus provider's queries (templates, overrides, the spec's check of them) and how it reads
Prometheus' answers, against canned answers: no data is 0 requests, a failed query is an error naming it."""

from __future__ import annotations

import asyncio
import functools
import math
import re

import httpx
import pytest

from gateway.metrics import prometheus
from gateway.metrics.prometheus import QUERIES, PrometheusProvider, check_overrides, promql_duration, render
from gateway.rollout.spec import SpecError, validate_spec

VARIANTS = ["baseline", "zero-layer"]


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


@pytest.mark.parametrize(
    ("seconds", "duration"), [(60, "60s"), (60.0, "60s"), (7.5, "7500ms"), (0.25, "250ms")]
)
def test_windows_are_whole_promql_durations(seconds, duration):
    assert promql_duration(seconds) == duration


def test_placeholders_are_filled_and_promql_braces_left_alone():
    query = render(QUERIES["retried"], "zero-layer", "zero-layer-with-fallback", 60)
    assert (
        query
        == 'sum(increase(envoy_cluster_upstream_rq_retry{envoy_cluster_name="zero-layer-with-fallback"}[60s]))'
    )
    for name, template in QUERIES.items():
        assert not re.search(r"\{\w+\}", render(template, "v", "v", 60)), name


def test_a_variant_behind_the_fallback_is_counted_on_its_aggregate_cluster():
    with_fallback = PrometheusProvider("http://p:9090", VARIANTS, "baseline")
    assert with_fallback.route_cluster("zero-layer") == "zero-layer-with-fallback"
    assert with_fallback.route_cluster("baseline") == "baseline"
    assert PrometheusProvider("http://p:9090", VARIANTS, None).route_cluster("zero-layer") == "zero-layer"


def test_overrides_replace_built_in_queries_by_name():
    override = 'sum(increase(my_attempts{cluster="{variant}"}[{window}]))'
    provider = PrometheusProvider("http://p:9090", VARIANTS, "baseline", queries={"attempts": override})
    assert provider.queries["attempts"] == override
    assert provider.queries["retried"] == QUERIES["retried"]
    spec = validate_spec(
        spec_with({"type": "prometheus", "url": "http://p:9090", "queries": {"attempts": override}})
    )
    assert spec.analysis.provider.queries == {"attempts": override}


def test_an_unknown_query_name_is_refused_naming_it():
    with pytest.raises(ValueError, match="unknown query 'atempts'"):
        check_overrides({"atempts": "sum(x)"})
    with pytest.raises(SpecError, match=r"analysis\.provider\.queries: unknown query 'atempts'"):
        validate_spec(
            spec_with({"type": "prometheus", "url": "http://p:9090", "queries": {"atempts": "sum(x)"}})
        )
    with pytest.raises(ValueError, match="unknown query 'atempts'"):
        PrometheusProvider("http://p:9090", VARIANTS, "baseline", queries={"atempts": "sum(x)"})


def test_an_unknown_placeholder_is_refused_naming_the_query():
    with pytest.raises(SpecError, match=r"query 'failed': unknown placeholder\(s\) \['varaint'\]"):
        validate_spec(spec_with({"type": "prometheus", "queries": {"failed": 'sum(x{v="{varaint}"})'}}))


def series(*found: tuple[dict[str, str], float]) -> dict:
    """Prometheus' answer holding these series (labels, value)."""
    result = [{"metric": labels, "value": [0, str(value)]} for labels, value in found]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def vector(*values: float) -> dict:
    return series(*(({}, value) for value in values))


def observe(monkeypatch, answer, queries=None):
    """The provider's observations, each query answered by `answer(name, variant)` (a status and a body)."""
    by_promql = {
        render(template, variant, provider_route(variant), 60): (name, variant)
        for variant in VARIANTS
        for name, template in {**QUERIES, **(queries or {})}.items()
    }

    def handler(request: httpx.Request) -> httpx.Response:
        status, body = answer(*by_promql[request.url.params["query"]])
        return (
            httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)
        )

    transport = httpx.MockTransport(handler)
    monkeypatch.setattr(
        prometheus.httpx, "AsyncClient", functools.partial(httpx.AsyncClient, transport=transport)
    )
    provider = PrometheusProvider("http://p:9090", VARIANTS, "baseline", queries=queries)
    return asyncio.run(provider.observe(60))


def provider_route(variant: str) -> str:
    return "zero-layer-with-fallback" if variant == "zero-layer" else variant


def test_requests_and_errors_add_their_terms_and_no_data_is_zero(monkeypatch):
    answers = {
        ("zero-layer", "attempts"): vector(120),
        ("zero-layer", "refused"): vector(30),
        ("zero-layer", "retried"): vector(100, 40),  # two Envoy replicas: summed
        ("zero-layer", "latency_p99"): vector(0.25),
        ("zero-layer", "ttft_p95"): vector(math.nan),  # buckets that did not move
        ("zero-layer", "weight_status"): series(
            ({"status": "ZEROED", "instance": "b:9101"}, 1), ({"status": "ERASED", "instance": "a:9101"}, 1)
        ),
    }
    seen = observe(monkeypatch, lambda name, variant: (200, answers.get((variant, name), vector())))
    assert seen.error is None
    zero, baseline = seen.variants["zero-layer"], seen.variants["baseline"]
    assert (zero.requests, zero.errors, zero.latency_p99, zero.ttft_p95) == (150, 140, 0.25, None)
    assert (baseline.requests, baseline.errors, baseline.latency_p99, baseline.ttft_p95) == (0, 0, None, None)
    assert seen.weight_status == {"zero-layer": ["ERASED", "ZEROED"]}  # by instance; baseline: no data


def test_a_query_prometheus_refuses_is_an_error_naming_it(monkeypatch):
    refused = {
        "status": "error",
        "errorType": "bad_data",
        "error": "1:5: parse error: unclosed left parenthesis",
    }

    def answer(name, variant):
        return (400, refused) if (name, variant) == ("failed", "zero-layer") else (200, vector())

    seen = observe(monkeypatch, answer)
    assert seen.variants == {}
    assert "prometheus query 'failed' for zero-layer" in seen.error
    assert "HTTP 400: bad_data: 1:5: parse error" in seen.error
    assert "more" not in seen.error  # the one query that failed


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (502, "<html>bad gateway</html>", "HTTP 502"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "not an instant vector"),
        (200, {"status": "success", "data": {"resultType": "scalar", "result": [0, "+Inf"]}}, "not a count"),
    ],
)
def test_an_answer_that_is_not_a_number_is_an_error_naming_the_query(monkeypatch, status, body, reason):
    seen = observe(
        monkeypatch, lambda name, variant: (status, body) if name == "attempts" else (200, vector())
    )
    assert "prometheus query 'attempts'" in seen.error
    assert reason in seen.error
    assert "(and 1 more failed)" in seen.error  # one per variant


def test_a_weight_status_override_must_keep_the_status_label(monkeypatch):
    queries = {"weight_status": 'count by (variant) (graystack_probe_weight_status{variant="{variant}"})'}
    seen = observe(
        monkeypatch, lambda name, variant: (200, vector(1) if name == "weight_status" else vector()), queries
    )
    assert "without a `status` label" in seen.error


def test_effective_windows_are_read_from_the_model_servers_info_series(monkeypatch):
    assert render(QUERIES["effective_window"], "zero-layer", "zero-layer-with-fallback", 60) == (
        'graystack_model_info{variant="zero-layer"} == 1'
    )
    info = {"__name__": "graystack_model_info", "variant": "zero-layer", "weight_status": "ACTIVE"}
    answers = {
        ("zero-layer", "effective_window"): series(
            ({**info, "effective_window": "128", "instance": "b:8002"}, 1),
            ({**info, "effective_window": "64", "instance": "a:8002"}, 1),
        ),
    }
    seen = observe(monkeypatch, lambda name, variant: (200, answers.get((variant, name), vector())))
    assert seen.error is None
    assert seen.effective_windows == {"zero-layer": [64, 128]}  # by instance; baseline: no data


def test_an_effective_window_override_must_keep_the_label(monkeypatch):
    queries = {"effective_window": 'count by (variant) (graystack_model_info{variant="{variant}"})'}
    seen = observe(
        monkeypatch,
        lambda name, variant: (200, vector(1) if name == "effective_window" else vector()),
        queries,
    )
    assert "without a `effective_window` label" in seen.error
