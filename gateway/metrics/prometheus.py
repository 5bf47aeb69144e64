"""The `prometheus` provider: the `direct` provider's questions, asked in PromQL of a Prometheus server.

Where a Prometheus already scrapes Envoy (every replica), the model servers and the probes, the gateway
needs no route to any of them, and the window is Prometheus' own. The numbers mean what they mean in
gateway/metrics/direct.py (read its docstring for why each counter): for a variant,
  requests = attempts + refused     (its cluster's and its shadow cluster's upstream_rq_total +
                                     upstream_rq_pending_failure_eject)
  errors   = retried + failed       (the route cluster's upstream_rq_retry, and the route and shadow
                                     clusters' upstream_rq{code=~5..})
  latency_p99 from the route and shadow clusters' upstream_rq_time, ttft_p95 from the model servers' histogram,
  weight_status from the probes' series at 1, ordered by `instance`, effective_windows from the model
  servers' graystack_model_info by its `effective_window` label, likewise, and the shadow comparisons'
  counts from the candidate's graystack_shadow_comparisons_total.
Each is its own query, so a series that does not exist yet (no 5xx so far) is "no data" for that term
alone; `a + b` in PromQL would be empty as soon as either side is.

Each query is a template: `{variant}`, `{route_cluster}` (the aggregate `<variant>-with-fallback`, or the
variant itself), `{shadow_cluster}` (`<variant>-shadow`, where mirrored copies go) and `{window}` (a PromQL duration such as `60s`) are filled in; PromQL's own braces
need no escaping. The spec can replace any of them by name (`analysis.provider.queries`), e.g. where
relabelling renamed a label; every query answers in the unit VariantWindow holds (counts, seconds).

How results are read, and where this differs on purpose from Flagger (no data = failure) and Argo
Rollouts (empty result = abort): an empty vector is no data, so 0 requests, and the analysis says
inconclusive; a query that fails (unreachable, timeout, HTTP error, Prometheus error status, an
answer that is not a number) is `Observations(error=...)` naming the query and the reason.
Every query of one `observe()` is evaluated at the same instant, so the counts come from the same scrapes.

Unlike the direct provider's window, Prometheus' `increase()` extrapolates to the window's edges (counts
need not be whole) and misses the first increase of a series created mid-window, such as the first
503's `envoy_response_code="503"`: with a fallback, the failures are counted by `upstream_rq_retry`,
which exists from the start.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from gateway.envoy import names
from gateway.rollout.analysis import Observations, VariantWindow

QUERIES: dict[str, str] = {
    "attempts": (
        'sum(increase(envoy_cluster_upstream_rq_total{envoy_cluster_name=~"{variant}|{shadow_cluster}"}[{window}]))'
    ),
    "refused": (
        "sum(increase(envoy_cluster_upstream_rq_pending_failure_eject"
        '{envoy_cluster_name=~"{variant}|{shadow_cluster}"}[{window}]))'
    ),
    "retried": 'sum(increase(envoy_cluster_upstream_rq_retry{envoy_cluster_name="{route_cluster}"}[{window}]))',
    "failed": (
        "sum(increase(envoy_cluster_upstream_rq"
        '{envoy_cluster_name=~"{route_cluster}|{shadow_cluster}",envoy_response_code=~"5.."}[{window}]))'
    ),
    "latency_p99": (
        "histogram_quantile(0.99, sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket"
        '{envoy_cluster_name=~"{route_cluster}|{shadow_cluster}"}[{window}]))) / 1000'
    ),
    "ttft_p95": (
        "histogram_quantile(0.95, sum by (le) (increase(graystack_request_ttft_seconds_bucket"
        '{variant="{variant}"}[{window}])))'
    ),
    "weight_status": 'graystack_probe_weight_status{variant="{variant}"} == 1',
    "effective_window": 'graystack_model_info{variant="{variant}"} == 1',
    "shadow_compared": (
        'sum(increase(graystack_shadow_comparisons_total{variant="{variant}",result=~"agree|differ"}[{window}]))'
    ),
    "shadow_agreed": 'sum(increase(graystack_shadow_comparisons_total{variant="{variant}",result="agree"}[{window}]))',
}
PLACEHOLDERS = frozenset({"variant", "route_cluster", "shadow_cluster", "window"})
_PLACEHOLDER = re.compile(r"\{(\w+)\}")  # `{name}`: never valid PromQL, whose braces hold label matchers


def check_overrides(queries: Mapping[str, str]) -> None:
    """ValueError naming the first override that is not a known query or uses an unknown placeholder."""
    for name, template in queries.items():
        if name not in QUERIES:
            raise ValueError(
                f"unknown query {name!r}; the prometheus provider's queries are {sorted(QUERIES)}"
            )
        unknown = sorted(set(_PLACEHOLDER.findall(template)) - PLACEHOLDERS)
        if unknown:
            raise ValueError(f"query {name!r}: unknown placeholder(s) {unknown}; use {sorted(PLACEHOLDERS)}")


def promql_duration(seconds: float) -> str:
    """`60s`, or `7500ms` (PromQL durations are whole numbers of a unit)."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def render(template: str, variant: str, route_cluster: str, window: float) -> str:
    values = {
        "variant": variant,
        "route_cluster": route_cluster,
        "shadow_cluster": names.shadow_cluster(variant),
        "window": promql_duration(window),
    }
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), template)


Sample = tuple[dict[str, str], float]  # a series' labels and its value


class QueryError(Exception):
    """A query that got no usable answer; the message names it and why."""


class PrometheusProvider:
    def __init__(
        self,
        url: str,
        variants: Sequence[str],
        fallback: str | None,
        queries: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`url`: Prometheus' base URL; `variants`, `fallback`: as in the rollout spec; `queries`: the
        spec's overrides, by name; `timeout`: seconds allowed for each query; `clock`: the instant
        (Unix seconds) the queries are evaluated at."""
        check_overrides(queries or {})
        self.api = f"{url.rstrip('/')}/api/v1/query"
        self.variants = list(variants)
        self.fallback = fallback
        self.queries = {**QUERIES, **(queries or {})}
        self.timeout = timeout
        self.clock = clock

    def route_cluster(self, variant: str) -> str:
        """The cluster the route names for `variant` (gateway/envoy/resources.py `cluster_for`)."""
        if self.fallback is None or variant == self.fallback:
            return variant
        return names.fallback_cluster(variant)

    async def observe(self, window_seconds: float, recent_seconds: float | None = None) -> Observations:
        at = self.clock()
        asked = [(variant, name, window_seconds) for variant in self.variants for name in self.queries]
        if recent_seconds:
            asked += [(variant, name, recent_seconds) for variant in self.variants for name in COUNTS]
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            answers = await asyncio.gather(
                *(self._query(client, name, variant, window, at) for variant, name, window in asked),
                return_exceptions=True,
            )
        failures = [str(answer) for answer in answers if isinstance(answer, QueryError)]
        if failures:
            more = f" (and {len(failures) - 1} more failed)" if len(failures) > 1 else ""
            return Observations(error=failures[0] + more)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        read: Answers = dict(zip(asked, answers, strict=True))
        variants = {}
        for v in self.variants:
            requests, errors = _counts(read, v, window_seconds)
            recent_requests, recent_errors = _counts(read, v, recent_seconds)
            variants[v] = VariantWindow(
                requests=requests,
                errors=errors,
                latency_p99=read[v, "latency_p99", window_seconds],
                ttft_p95=read[v, "ttft_p95", window_seconds],
                recent_requests=recent_requests,
                recent_errors=recent_errors,
                shadow_compared=read[v, "shadow_compared", window_seconds],
                shadow_agreed=read[v, "shadow_agreed", window_seconds],
            )
        statuses = {v: read[v, "weight_status", window_seconds] for v in self.variants}
        windows = {v: read[v, "effective_window", window_seconds] for v in self.variants}
        return Observations(
            variants=variants,
            weight_status={v: s for v, s in statuses.items() if s},
            effective_windows={v: w for v, w in windows.items() if w},
        )

    async def _query(
        self, client: httpx.AsyncClient, name: str, variant: str, window: float, at: float
    ) -> Any:
        """The query's answer, read as its kind (a count, a quantile, statuses); QueryError otherwise."""
        promql = render(self.queries[name], variant, self.route_cluster(variant), window)
        where = f"prometheus query {name!r} for {variant} ({promql})"
        try:
            async with asyncio.timeout(self.timeout):
                response = await client.get(self.api, params={"query": promql, "time": f"{at:.3f}"})
        except TimeoutError:
            raise QueryError(f"{where} timed out after {self.timeout}s") from None
        except httpx.HTTPError as error:
            raise QueryError(f"{where} failed: {error!r}") from error
        try:
            return READERS[name](_samples(response))
        except Exception as error:  # whatever Prometheus answers, the controller must not crash on it
            raise QueryError(f"{where} failed: {error}") from error


Answers = dict[tuple[str, str, float], Any]  # (variant, query name, window) -> its reading


def _counts(read: Answers, variant: str, window: float | None) -> tuple[float, float]:
    """(requests, errors) over `window`, as the module docstring sums them; (0, 0) without a window."""
    if not window:
        return 0.0, 0.0
    attempts, refused, retried, failed = (read[variant, name, window] for name in COUNTS)
    return attempts + refused, retried + failed


def _samples(response: httpx.Response) -> list[Sample]:
    """The result of an instant query: a vector's series, or a scalar as one unlabelled sample."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = f": {body.get('errorType')}: {body.get('error')}" if isinstance(body, dict) else ""
        raise ValueError(f"HTTP {response.status_code}{detail}")
    data = body["data"]
    if data["resultType"] == "scalar":
        return [({}, float(data["result"][1]))]
    if data["resultType"] != "vector":
        raise ValueError(f"answered a {data['resultType']}, not an instant vector")
    return [(dict(series["metric"]), float(series["value"][1])) for series in data["result"]]


def _count(samples: list[Sample]) -> float:
    """Its series summed; no series (or NaN) is no data, so 0."""
    values = [value for _, value in samples if not math.isnan(value)]
    if any(math.isinf(value) for value in values):
        raise ValueError(f"answered {values}, not a count")
    return sum(values)


def _quantile(samples: list[Sample]) -> float | None:
    """The highest of its series; None without data (histogram_quantile answers NaN, or nothing, for
    buckets that did not move)."""
    values = [value for _, value in samples if not math.isnan(value)]
    return max(values) if values else None


def _by_instance(samples: list[Sample], label: str) -> list[str]:
    """Each series' `label`, ordered by its `instance`."""
    if any(label not in labels for labels, _ in samples):
        raise ValueError(f"answered a series without a `{label}` label")
    ordered = sorted((labels for labels, _ in samples), key=lambda labels: labels.get("instance", ""))
    return [labels[label] for labels in ordered]


def _statuses(samples: list[Sample]) -> list[str]:
    """The status each probe reports now (its series' `status`), ordered by the probe's `instance`."""
    return _by_instance(samples, "status")


def _windows(samples: list[Sample]) -> list[int]:
    """The effective window each model server serves now (its series' `effective_window`), ordered by
    the server's `instance`."""
    return [int(window) for window in _by_instance(samples, "effective_window")]


COUNTS = ("attempts", "refused", "retried", "failed")  # asked again over the recent part of the window
READERS = {
    "attempts": _count,
    "refused": _count,
    "retried": _count,
    "failed": _count,
    "latency_p99": _quantile,
    "ttft_p95": _quantile,
    "weight_status": _statuses,
    "effective_window": _windows,
    "shadow_compared": _count,
    "shadow_agreed": _count,
}
