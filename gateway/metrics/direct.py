"""The `direct` provider: scrape Envoy's admin stats and the pods' /metrics, no Prometheus server needed.

Each `observe()` scrapes every target once and keeps the counters in a `WindowStore`; windows are
measured between scrapes, so the first call only sets the starting point (every count is 0). The
controller calls it each analysis interval, which is what fills the window.

Where each number comes from, and why:

requests, errors: Envoy, per attempt. Not the model servers' `graystack_requests_total`: it also
  counts the probes' synthetic requests, which go to the pod directly, and it cannot count what never
  reached the server or never finished (a crashed pod, refused connections, a stall cut by Envoy's
  first-byte timeout). With `retries.fallback`, a variant is routed through the aggregate cluster
  `<variant>-with-fallback`, and a failed attempt retried on the baseline reaches the client as a
  200 charged to the aggregate (shared/research/envoy_fallback_retry.md): reading final response
  codes alone shows 0 % errors for a variant that fails every request. So, for a variant:
    requests = upstream_rq_total{cluster=<variant>}                 attempts that reached it
             + upstream_rq_pending_failure_eject{cluster=<variant>} attempts whose connection failed
    errors   = upstream_rq_retry{cluster=<route cluster>}           failed attempts that were retried
             + upstream_rq{cluster=<route cluster>, code=~5..}      failures that reached the client
  where the route cluster is the aggregate (or the variant itself without a fallback, and for the
  fallback variant). `upstream_rq_retry` rather than `retry_upstream_rq{code=~5..}`: the latter only
  has attempts that got a response code, so a connection refused or a stall cut by the per-try
  timeout, both retried, would not count (checked against Envoy 1.40 on loopback).
  Limits: a fallback attempt that also fails is charged to the variant too (its final 5xx), so a
  failing baseline can raise the variant's count above its attempts; the analysis caps errors at
  requests. The baseline's attempts include the fallbacks it served, its errors exclude theirs.

  Mirrored copies (the shadow phase) go to the cluster `<variant>-shadow` and are never retried; a
  copy whose connection failed is counted both as refused and as a 503 (checked against Envoy 1.40):
    requests += upstream_rq_total{cluster=<variant>-shadow} + upstream_rq_pending_failure_eject{...}
    errors   += upstream_rq{cluster=<variant>-shadow, code=~5..}

latency_p99: Envoy's `upstream_rq_time` (ms) of the route cluster and the shadow cluster: the time the variant's share of
  clients waited on upstreams, retries included, measured the same way for every variant so the
  ratio compares like with like. Envoy updates histograms at each stats flush (5 s by default).

ttft_p95: the model servers' `graystack_request_ttft_seconds`, all pods and prompt buckets of the
  variant (Envoy cannot see a first token).

weight_status: each probe's `graystack_probe_weight_status` series whose value is 1.

effective_windows: each model server's `graystack_model_info` (value 1), read by its `effective_window`
  label: the distance past which the bias it serves is zero.

shadow_compared, shadow_agreed: the candidate's `graystack_shadow_comparisons_total` (agree + differ,
  and agree): its shadow copies' greedy answers against the baseline's (inference/server/outputs.py).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.envoy import names
from gateway.metrics.window import SeriesKey, WindowStore, series_key
from gateway.rollout.analysis import Observations, VariantWindow

# Sample names as prometheus_client's parser gives them: it appends `_total` to counters, so Envoy's
# `envoy_cluster_upstream_rq{envoy_response_code}` and `envoy_cluster_upstream_rq_total` come out with
# the same name, told apart by the response-code label.
UPSTREAM_RQ = "envoy_cluster_upstream_rq_total"
PENDING_FAILURE_EJECT = "envoy_cluster_upstream_rq_pending_failure_eject_total"
RETRIES = "envoy_cluster_upstream_rq_retry_total"
RQ_TIME_BUCKET = "envoy_cluster_upstream_rq_time_bucket"
TTFT_BUCKET = "graystack_request_ttft_seconds_bucket"
WEIGHT_STATUS = "graystack_probe_weight_status"
SHADOW_COMPARISONS = "graystack_shadow_comparisons_total"
MODEL_INFO = "graystack_model_info"
# Envoy's admin filters by stat name before tags are extracted: only the stats read below, which cuts the
# page from ~150 KB (~30 ms to parse on the controller's event loop, every interval) to a few KB.
ENVOY_FILTER = r"^cluster\..+\.upstream_rq_(total|retry|pending_failure_eject|time|5\d\d)$"
WANTED = frozenset(
    {
        UPSTREAM_RQ,
        PENDING_FAILURE_EJECT,
        RETRIES,
        RQ_TIME_BUCKET,
        TTFT_BUCKET,
        WEIGHT_STATUS,
        SHADOW_COMPARISONS,
        MODEL_INFO,
    }
)

CLUSTER = "envoy_cluster_name"
CODE = "envoy_response_code"
SERVER_ERROR = re.compile(r"5\d\d")
COMPARED = re.compile("agree|differ")  # a shadow comparison that found the baseline's answer
INSTANCE = "instance"  # added to every series, as Prometheus does, so two pods' series stay apart


class ScrapeError(Exception):
    """A target that did not answer with metrics; the message names it."""


class DirectProvider:
    def __init__(
        self,
        envoy_admin: str,
        pods: Sequence[str],
        variants: Sequence[str],
        fallback: str | None,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`envoy_admin`: Envoy's admin base URL; `pods`: the /metrics URLs of the model servers and
        probes; `variants`, `fallback`: as in the rollout spec (they name Envoy's clusters);
        `timeout`: seconds allowed for each target's whole scrape."""
        self.envoy_url = f"{envoy_admin.rstrip('/')}/stats/prometheus"
        self.pods = list(pods)
        self.variants = list(variants)
        self.fallback = fallback
        self.timeout = timeout
        self._store = WindowStore(clock, retention=0.0)

    async def observe(self, window_seconds: float, recent_seconds: float | None = None) -> Observations:
        targets = [(self.envoy_url, {"filter": ENVOY_FILTER}), *((pod, {}) for pod in self.pods)]
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            scrapes = await asyncio.gather(
                *(self._scrape(client, url, params) for url, params in targets), return_exceptions=True
            )
        failures = [str(result) for result in scrapes if isinstance(result, ScrapeError)]
        if failures:
            return Observations(error="; ".join(failures))
        merged: dict[SeriesKey, float] = {}
        for scrape in scrapes:
            merged.update(scrape)
        self._store.retention = max(self._store.retention, window_seconds)
        self._store.record(merged)
        return Observations(
            variants={v: self._variant_window(v, window_seconds, recent_seconds) for v in self.variants},
            weight_status=_by_instance(merged, WEIGHT_STATUS, "status"),
            effective_windows={
                variant: [int(window) for window in windows]
                for variant, windows in _by_instance(merged, MODEL_INFO, "effective_window").items()
            },
        )

    async def _scrape(
        self, client: httpx.AsyncClient, url: str, params: Mapping[str, str]
    ) -> dict[SeriesKey, float]:
        try:
            async with asyncio.timeout(self.timeout):
                response = await client.get(url, params=params)
            response.raise_for_status()
            families = list(text_string_to_metric_families(response.text))
        except TimeoutError:
            raise ScrapeError(f"scrape of {url} timed out after {self.timeout}s") from None
        except Exception as error:  # whatever a target answers, the controller must not crash on it
            raise ScrapeError(f"scrape of {url} failed: {error!r}") from error
        return {
            series_key(sample.name, {**sample.labels, INSTANCE: url}): sample.value
            for family in families
            for sample in family.samples
            if sample.name in WANTED
        }

    def _route_cluster(self, variant: str) -> str:
        """The cluster the route names for `variant` (gateway/envoy/resources.py `cluster_for`)."""
        if self.fallback is None or variant == self.fallback:
            return variant
        return names.fallback_cluster(variant)

    def _variant_window(self, variant: str, window: float, recent: float | None) -> VariantWindow:
        clusters = self._clusters(variant)
        requests, errors = self._counts(clusters, window)
        recent_requests, recent_errors = self._counts(clusters, recent) if recent else (0.0, 0.0)
        latency_ms = self._store.quantile(0.99, RQ_TIME_BUCKET, {CLUSTER: clusters.answered}, window)
        comparisons = {"variant": variant}
        return VariantWindow(
            requests=requests,
            errors=errors,
            latency_p99=None if latency_ms is None else latency_ms / 1000,
            ttft_p95=self._store.quantile(0.95, TTFT_BUCKET, comparisons, window),
            recent_requests=recent_requests,
            recent_errors=recent_errors,
            shadow_compared=self._store.increase(
                SHADOW_COMPARISONS, {**comparisons, "result": COMPARED}, window
            ),
            shadow_agreed=self._store.increase(
                SHADOW_COMPARISONS, {**comparisons, "result": "agree"}, window
            ),
        )

    def _clusters(self, variant: str) -> _Clusters:
        route, shadow = self._route_cluster(variant), names.shadow_cluster(variant)
        return _Clusters(
            route=route,
            own=re.compile(f"{re.escape(variant)}|{re.escape(shadow)}"),
            answered=re.compile(f"{re.escape(route)}|{re.escape(shadow)}"),
        )

    def _counts(self, clusters: _Clusters, window: float) -> tuple[float, float]:
        """(requests, errors) over the last `window` seconds (the module docstring's sums)."""
        store = self._store
        attempts = store.increase(UPSTREAM_RQ, {CLUSTER: clusters.own, CODE: ""}, window)
        refused = store.increase(PENDING_FAILURE_EJECT, {CLUSTER: clusters.own}, window)
        retried = store.increase(RETRIES, {CLUSTER: clusters.route}, window)
        failed = store.increase(UPSTREAM_RQ, {CLUSTER: clusters.answered, CODE: SERVER_ERROR}, window)
        return attempts + refused, retried + failed


@dataclass(frozen=True)
class _Clusters:
    """A variant's Envoy clusters as the sums need them."""

    route: str  # the cluster its route names
    own: re.Pattern[str]  # whose attempts reach it: its own cluster and its shadow cluster
    answered: re.Pattern[str]  # whose answers are its: the route cluster and the shadow cluster


def _by_instance(scrape: Mapping[SeriesKey, float], name: str, label: str) -> dict[str, list[str]]:
    """variant -> `label` of each of its `name` series at 1 (a probe's status, a model server's
    window), ordered by target URL."""
    reported: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for (series, label_pairs), value in scrape.items():
        labels = dict(label_pairs)
        if series == name and value == 1:
            reported[labels["variant"]].append((labels[INSTANCE], labels[label]))
    return {variant: [found for _, found in sorted(pairs)] for variant, pairs in reported.items()}
