"""Per-variant request rate, error rate, TTFT p95 and weight status over the last few seconds, read from
the model servers' and probes' own /metrics (what the live view shows; the rollout's decisions come
from the gateway's analysis, not from here).

The model servers count every request they answer, including the probes' synthetic ones (one per probe
interval) and the fallback's retries on the baseline.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from inference.families import PROBE_WEIGHT_STATUS, REQUEST_TTFT, REQUESTS


@dataclass(frozen=True)
class Counters:
    """One scrape of one model server: cumulative counts, and the TTFT histogram as (le, count) pairs."""

    at: float
    requests: float
    errors: float
    ttft: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class VariantStats:
    rate: float | None  # requests per second
    error_rate: float | None  # share answered 5xx
    ttft_p95: float | None  # seconds
    weight_status: str


def parse_counters(text: str, at: float) -> Counters:
    requests = errors = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == REQUESTS:
                requests += sample.value
                if sample.labels.get("code", "").startswith("5"):
                    errors += sample.value
            elif sample.name == f"{REQUEST_TTFT}_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    return Counters(at, requests, errors, tuple(sorted(buckets.items())))


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile on cumulative (le, count) pairs: linear within the bucket it falls in;
    the highest finite bound if it falls in the +Inf bucket; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower_bound
            span = count - lower_count
            return lower_bound + (le - lower_bound) * ((rank - lower_count) / span if span else 1.0)
        lower_bound, lower_count = le, count
    return lower_bound


def window_stats(old: Counters, new: Counters, weight_status: str) -> VariantStats:
    """Rates between two scrapes; a counter that went down (a restarted server) counts from zero."""
    elapsed = new.at - old.at
    if elapsed <= 0:
        return VariantStats(None, None, None, weight_status)
    restarted = new.requests < old.requests
    base = Counters(old.at, 0.0, 0.0, ()) if restarted else old
    requests = new.requests - base.requests
    errors = new.errors - base.errors
    before = dict(base.ttft)
    ttft = [(le, count - before.get(le, 0.0)) for le, count in new.ttft]
    return VariantStats(
        requests / elapsed,
        errors / requests if requests else None,
        bucket_quantile(0.95, ttft),
        weight_status,
    )


def probe_weight_status(text: str) -> str:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == PROBE_WEIGHT_STATUS and sample.value == 1:
                return sample.labels["status"]
    return "-"


class VariantMeter:
    """Scrapes each variant's model server and probe; `read()` gives stats over the last `span` seconds."""

    def __init__(self, servers: dict[str, str], probes: dict[str, str], span: float = 5.0) -> None:
        self.servers = servers
        self.probes = probes
        self.span = span
        self._history: dict[str, deque[Counters]] = {v: deque() for v in servers}
        self._http = httpx.Client(timeout=2)

    def close(self) -> None:
        self._http.close()

    def _get(self, url: str) -> str | None:
        try:
            response = self._http.get(f"{url}/metrics")
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None

    def read(self) -> dict[str, VariantStats]:
        now = time.monotonic()
        stats = {}
        for variant, url in self.servers.items():
            probe_text = self._get(self.probes[variant]) if variant in self.probes else None
            weight_status = probe_weight_status(probe_text) if probe_text else "-"
            text = self._get(url)
            history = self._history[variant]
            if text is not None:
                history.append(parse_counters(text, now))
            while len(history) > 2 and now - history[1].at >= self.span:
                history.popleft()
            if len(history) < 2:
                stats[variant] = VariantStats(None, None, None, weight_status)
            else:
                stats[variant] = window_stats(history[0], history[-1], weight_status)
        return stats
