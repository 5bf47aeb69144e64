"""The `prometheus` provider: the `direct` provider's series, read from a Prometheus server.

Where a Prometheus already scrapes Envoy (every replica), the model servers and the probes, the gateway
needs no route to any of them. The counters mean what they mean in gateway/metrics/direct.py (read its
docstring for why each); the queries, one per term, are in gateway/spec/queries.py. Each selects raw
series (no `increase()`, no `sum()`), so every series comes back as one sample, as it stood at
Prometheus' last scrape of it, and is reported as its own entry: its source is its metric and labels
(`instance` and `job` among them), so two Envoy replicas' or two pods' series stay apart, and a
restarted pod's series falls, which the consumer reads as a reset. Increments therefore come in steps
of the scrape interval (still valid, just lumpier than the direct provider's).

How results are read: an empty vector is no data (no entry; a series that does not exist yet, such as
the first 503's `envoy_response_code="503"`, counts from 0 when it appears); a query that fails
(unreachable, timeout, HTTP error, Prometheus error status, an answer that is not a series of counts)
is `Observations(error=...)` naming the query and the reason. Every query of one `observe()` is
evaluated at the same instant, so the counts come from the same scrapes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from gateway import outbound
from gateway.errors import Unreachable
from gateway.metrics.observations import CounterKey, Observations
from gateway.metrics.queries import BUCKETS, SIGNALS, render
from gateway.metrics.series import NAME, charged_once, counter_key, fallback_routes, route_cluster
from gateway.spec.queries import QUERIES, check_overrides

Sample = tuple[dict[str, str], float]  # a series' labels and its value


class QueryError(Unreachable):
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
        attempts: int = 1,
    ) -> None:
        """`url`: Prometheus' base URL; `variants`, `fallback`: as in the rollout spec; `queries`: the
        spec's overrides, by name; `timeout`: seconds allowed for each query; `clock`: the instant
        (Unix seconds) the queries are evaluated at; `attempts`: the spec's `retries.attempts` (with one,
        each failed attempt is charged once, to the variant that made it: gateway/metrics/direct.py)."""
        check_overrides(queries or {})
        self.api = f"{url.rstrip('/')}/api/v1/query"
        self.variants = list(variants)
        self.fallback = fallback
        self.attempts = attempts
        self.queries = {**QUERIES, **(queries or {})}
        self.timeout = timeout
        self.clock = clock

    def promql(self, name: str, variant: str) -> str:
        """Query `name` as asked for `variant`."""
        routes = fallback_routes(variant, self.variants, self.fallback, self.attempts)
        return render(self.queries[name], variant, route_cluster(variant, self.fallback), routes)

    def asks(self, name: str, variant: str) -> bool:
        """Whether query `name` is asked for `variant`: with each failed attempt charged once, `rescued`
        in place of `retried` behind a fallback aggregate, and `fallbacks_failed` for the fallback alone."""
        once = charged_once(variant, self.fallback, self.attempts)
        if name in ("retried", "rescued"):
            return once == (name == "rescued")
        if name == "fallbacks_failed":
            return bool(fallback_routes(variant, self.variants, self.fallback, self.attempts))
        return True

    def new_count(self) -> None:
        """Nothing is kept between looks."""

    def close(self) -> None:
        """Nothing runs in the background: each look opens and closes its own client."""

    async def observe(self) -> Observations:
        at = self.clock()
        asked = [(v, name) for v in self.variants for name in self.queries if self.asks(name, v)]
        async with httpx.AsyncClient(timeout=self.timeout, verify=outbound.tls()) as client:
            answers = await asyncio.gather(
                *(self._query(client, name, variant, at) for variant, name in asked), return_exceptions=True
            )
        failures = [str(answer) for answer in answers if isinstance(answer, QueryError)]
        if failures:
            more = f" (and {len(failures) - 1} more failed)" if len(failures) > 1 else ""
            return Observations(error=failures[0] + more)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        read: dict[tuple[str, str], Any] = dict(zip(asked, answers, strict=True))
        counters: dict[CounterKey, float] = {}
        for (variant, name), answer in read.items():
            if name not in SIGNALS:
                continue
            for key, value in answer:
                if key in counters:
                    return Observations(error=f"{self._where(name, variant)} answered {key.source} twice")
                counters[key] = value
        statuses = {v: read[v, "weight_status"] for v in self.variants}
        windows = {v: read[v, "effective_window"] for v in self.variants}
        mismatches = {v: read[v, "server_mismatch"] for v in self.variants}
        return Observations(
            counters=counters,
            weight_status={v: s for v, s in statuses.items() if s},
            effective_windows={v: w for v, w in windows.items() if w},
            mismatches={v: m for v, m in mismatches.items() if m},
        )

    def _where(self, name: str, variant: str) -> str:
        return f"prometheus query {name!r} for {variant} ({self.promql(name, variant)})"

    async def _query(self, client: httpx.AsyncClient, name: str, variant: str, at: float) -> Any:
        """The query's answer, read as its kind (counter series, statuses, mismatch reasons, windows);
        QueryError otherwise."""
        where = self._where(name, variant)
        try:
            async with asyncio.timeout(self.timeout):
                response = await client.get(
                    self.api, params={"query": self.promql(name, variant), "time": f"{at:.3f}"}
                )
        except TimeoutError:
            raise QueryError(f"{where} timed out after {self.timeout}s") from None
        except httpx.HTTPError as error:
            raise QueryError(f"{where} failed: {error!r}") from error
        try:
            samples = _samples(response)
            if name == "weight_status":
                return _by_instance(samples, "status")
            if name == "server_mismatch":
                return _by_instance(samples, "reason")
            if name == "effective_window":
                return [int(window) for window in _by_instance(samples, "effective_window")]
            return _counters(samples, variant, name)
        except Exception as error:  # whatever Prometheus answers, the controller must not crash on it
            raise QueryError(f"{where} failed: {error}") from error


def _samples(response: httpx.Response) -> list[Sample]:
    """The series of an instant query's vector."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = f": {body.get('errorType')}: {body.get('error')}" if isinstance(body, dict) else ""
        raise ValueError(f"HTTP {response.status_code}{detail}")
    data = body["data"]
    if data["resultType"] != "vector":
        raise ValueError(f"answered a {data['resultType']}, not an instant vector")
    return [(dict(series["metric"]), float(series["value"][1])) for series in data["result"]]


def _counters(samples: list[Sample], variant: str, name: str) -> list[tuple[CounterKey, float]]:
    """Each series as `variant`'s counter for query `name`'s signal, keyed by its labels."""
    signal = SIGNALS[name]
    found = []
    for labels, value in samples:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"answered {value} for {labels}, not a count")
        if name in BUCKETS and "le" not in labels:
            raise ValueError("answered a series without an `le` label (select the _bucket series)")
        found.append((counter_key(variant, signal, labels.get(NAME, ""), labels), value))
    return found


def _by_instance(samples: list[Sample], label: str) -> list[str]:
    """Each series' `label`, ordered by its `instance`."""
    if any(label not in labels for labels, _ in samples):
        raise ValueError(f"answered a series without a `{label}` label")
    ordered = sorted((labels for labels, _ in samples), key=lambda labels: labels.get("instance", ""))
    return [labels[label] for labels in ordered]
