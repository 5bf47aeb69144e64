"""What each pod's own metrics said, last time they were read (pure: the reader, gateway/epp/metrics_reader.py,
does the I/O and hands the text and the time in). A pick reads only what is here, never the network, so a
pod whose metrics hang costs a pick nothing: its reading goes stale and it is scored by what the picker
counts itself (gateway/epp/scorers.py), and `fallbacks` says so and why.

The names, from the servers' documentation: vLLM's `vllm:num_requests_waiting` and
`vllm:kv_cache_usage_perc` (a fraction, despite the name), and `vllm:lora_requests_info` (exported only
where the server serves LoRA adapters: its labels list the adapters running and waiting, comma-separated,
and `max_lora`, how many it runs at once; its value is the time it was set, so the newest sample wins); llama.cpp's `llamacpp:requests_deferred` and
`llamacpp:kv_cache_usage_ratio` (in its server README, though recent builds no longer export it: a pod
without a KV reading is scored on KV by its in-flight count).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

QUEUE = ("vllm:num_requests_waiting", "llamacpp:requests_deferred")
KV_CACHE = ("vllm:kv_cache_usage_perc", "llamacpp:kv_cache_usage_ratio")
LORA = "vllm:lora_requests_info"
STALE_AFTER = 3  # intervals: a reading older than this many is not used


@dataclass(frozen=True)
class Adapters:
    """The LoRA adapters a vLLM server runs and those waiting to be loaded, and how many it runs at once."""

    running: frozenset[str] = frozenset()
    waiting: frozenset[str] = frozenset()
    most: int = 0


@dataclass(frozen=True)
class Reading:
    """One pod's load as its server reported it; None where it reports no such series."""

    queue: float | None = None
    kv_cache: float | None = None
    adapters: Adapters | None = None


def _names(text: str) -> frozenset[str]:
    return frozenset(filter(None, (name.strip() for name in text.split(","))))


def _count(text: str) -> int:
    """`max_lora`'s label value; 0 (no room known) where it is not a number."""
    try:
        return max(int(float(text)), 0)
    except ValueError:
        return 0


def parse(text: str) -> Reading:
    """A Reading from a Prometheus text exposition; ValueError when the text is not one."""
    queue: float | None = None
    kv_cache: float | None = None
    lora: tuple[float, Adapters] | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in QUEUE:
                queue = (queue or 0.0) + sample.value  # summed over a server's labels (one per engine)
            elif sample.name in KV_CACHE:
                kv_cache = max(kv_cache or 0.0, sample.value)
            elif sample.name == LORA and (lora is None or sample.value >= lora[0]):
                labels = sample.labels
                adapters = Adapters(
                    _names(labels.get("running_lora_adapters", "")),
                    _names(labels.get("waiting_lora_adapters", "")),
                    _count(labels.get("max_lora", "")),
                )
                lora = (sample.value, adapters)
    return Reading(queue, kv_cache, lora[1] if lora is not None else None)


@dataclass(frozen=True)
class _Last:
    reading: Reading | None
    at: float  # when the last good reading was taken (or, with none yet, when the first try failed)
    error: str | None  # why the latest try failed; None when it succeeded


class Readings:
    """The last reading of each pod and the latest failure, kept by the reader; `interval`: how often it
    reads (a reading older than STALE_AFTER of them is stale)."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last: dict[str, _Last] = {}

    def record(self, endpoint: str, reading: Reading, now: float) -> None:
        self._last[endpoint] = _Last(reading, now, None)

    def failed(self, endpoint: str, error: str, now: float) -> bool:
        """The latest try failed: the reading before it stands until it is stale. True when the try
        before it did not fail (news worth a log line)."""
        last = self._last.get(endpoint)
        self._last[endpoint] = _Last(last.reading, last.at, error) if last else _Last(None, now, error)
        return last is None or last.error is None

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the pods that left the pool."""
        kept = set(keep)
        self._last = {endpoint: last for endpoint, last in self._last.items() if endpoint in kept}

    def fresh(self, now: float) -> dict[str, Reading]:
        """The readings a pick may use: those no older than STALE_AFTER intervals."""
        return {
            endpoint: last.reading
            for endpoint, last in self._last.items()
            if last.reading is not None and now - last.at <= STALE_AFTER * self.interval
        }

    def fallbacks(self, endpoints: Iterable[str], now: float) -> dict[str, str]:
        """The endpoints scored by in-flight counts alone, each with why: never read, or stale and the
        latest error."""
        out: dict[str, str] = {}
        for endpoint in endpoints:
            last = self._last.get(endpoint)
            if last is None:
                out[endpoint] = "metrics not read yet"
            elif last.reading is None:
                out[endpoint] = f"metrics unreadable: {last.error}"
            elif now - last.at > STALE_AFTER * self.interval:
                out[endpoint] = f"metrics {now - last.at:.1f}s old" + (
                    f": {last.error}" if last.error else ""
                )
        return out
