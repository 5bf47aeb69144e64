"""The model server's metric families (their names: inference/families.py), read by dashboards and alerts.

Each app gets its own CollectorRegistry, so several servers can live in one process (tests). TTFT and
inter-token buckets are geometric, 1.2 apart and anchored at the 2 s SLO edge (inference/latency_buckets.py
says why: the rollout's latency tests need them); e2e and batch buckets are vLLM's families
(vllm/v1/metrics/buckets.py).
The vLLM gauge names are exported too: load-aware routers (Gateway API Inference Extension, llm-d)
read them as they are. Beyond the first design: graystack_engine_decode_batch_size, which shows
continuous batching at work (steps that advanced more than one sequence), and graystack_model_info's
`checkpoint` label, the loaded files' fingerprint, which the probe compares with the file on disk
(probes/loaded.py): the file is not always what the server loaded.
"""

from __future__ import annotations

import re
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from inference import families
from inference.engine import Engine
from inference.kernels.blocks import BlockCounts
from inference.latency_buckets import INTER_TOKEN_BUCKETS, TTFT_BUCKETS
from inference.prompt_buckets import prompt_bucket

E2E_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
# The gateway sets this header to the routing segment of each request it forwards (gateway/names.py;
# inference/ does not import the gateway): "default" for the default split, else the header rule's value.
# Latency histograms carry it, so the rollout compares variants only where traffic was split at random.
SEGMENT_HEADER = "x-graystack-segment"
MAX_SEGMENTS = 32
_SEGMENT = re.compile(r"[A-Za-z0-9_.:-]{0,64}")


class ServerMetrics:
    def __init__(self, variant: str, model_name: str) -> None:
        self.variant = variant
        self._segments: set[str] = set()
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes and friends (Linux)
        variant_only = ["variant"]
        self.requests = Counter(
            families.REQUESTS,
            "Model requests answered, by HTTP status (a stream that fails after its headers counts as "
            "the status of its error event)",
            ["variant", "code"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            families.REQUEST_TTFT,
            "Time from a request's arrival to its first generated token, by the gateway segment the request "
            "came through (SEGMENT_HEADER) and its prompt length",
            ["variant", "segment", "prompt_bucket"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.inter_token = Histogram(
            families.REQUEST_INTER_TOKEN,
            "Time between consecutive generated tokens of one request (one observation per engine step), by "
            "the gateway segment the request came through",
            ["variant", "segment"],
            buckets=INTER_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.time_per_token = Histogram(
            families.REQUEST_TIME_PER_OUTPUT_TOKEN,
            "Each request's mean time between its generated tokens (one observation per request of two "
            "or more tokens, at its end), by the gateway segment it came through: what the rollout "
            "compares, since a request, not a token, is what the gateway routes at random",
            ["variant", "segment"],
            buckets=INTER_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            families.REQUEST_E2E,
            "Time from a request's arrival to its last token",
            variant_only,
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            families.TOKENS,
            "Tokens processed, by kind (prompt or generated)",
            ["variant", "kind"],
            registry=self.registry,
        )
        self.running = Gauge(
            families.REQUESTS_RUNNING, "Requests in the decode batch", variant_only, registry=self.registry
        )
        self.waiting = Gauge(
            families.REQUESTS_WAITING,
            "Requests queued for the batch",
            variant_only,
            registry=self.registry,
        )
        self.bias_blocks = Counter(
            families.ATTENTION_BIAS_BLOCKS,
            "Attention key blocks that did relative-position-bias work (computed) or skipped it",
            ["variant", "result"],
            registry=self.registry,
        )
        self.shadow_comparisons = Counter(
            families.SHADOW_COMPARISONS,
            "Shadow copies' greedy answers compared with the baseline's answer to the same request",
            ["variant", "result"],
            registry=self.registry,
        )
        self.model_info = Gauge(
            families.MODEL_INFO,
            "The model being served (value 1); `checkpoint`: the fingerprint of the files it loaded (the "
            "weight check's, which the probe compares with the file on disk; empty where the check gives none)",
            ["variant", "fingerprint", "weight_status", "effective_window", "checkpoint"],
            registry=self.registry,
        )
        self.decode_batch = Histogram(
            families.ENGINE_DECODE_BATCH_SIZE,
            "Sequences advanced by one decode step (continuous batching shares steps)",
            variant_only,
            buckets=BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        vllm_labels = ["model_name", "variant"]
        self.vllm_waiting = Gauge(
            families.VLLM_NUM_REQUESTS_WAITING,
            "Requests waiting (vLLM name)",
            vllm_labels,
            registry=self.registry,
        )
        self.vllm_running = Gauge(
            families.VLLM_NUM_REQUESTS_RUNNING,
            "Requests running (vLLM name)",
            vllm_labels,
            registry=self.registry,
        )
        self.vllm_kv_usage = Gauge(
            families.VLLM_KV_CACHE_USAGE,
            "KV-cache usage, 0-1: cached tokens over max_running full contexts (vLLM name)",
            vllm_labels,
            registry=self.registry,
        )
        self._vllm = {"model_name": model_name, "variant": variant}
        for counter, labels in (
            (self.requests, {"code": "200"}),
            (self.tokens, {"kind": "prompt"}),
            (self.tokens, {"kind": "generated"}),
            (self.bias_blocks, {"result": "computed"}),
            (self.bias_blocks, {"result": "skipped"}),
        ):
            counter.labels(variant=variant, **labels)  # present at 0 before the first request

    def watch(self, engine: Engine) -> None:
        """Read the engine's queue gauges at scrape time."""
        self.running.labels(self.variant).set_function(lambda: engine.running)
        self.waiting.labels(self.variant).set_function(lambda: engine.waiting)
        self.vllm_running.labels(**self._vllm).set_function(lambda: engine.running)
        self.vllm_waiting.labels(**self._vllm).set_function(lambda: engine.waiting)
        self.vllm_kv_usage.labels(**self._vllm).set_function(lambda: engine.kv_cache_usage)

    def set_model(self, fingerprint: str, weight_status: str, effective_window: int, checkpoint: str) -> None:
        """`checkpoint`: the loaded files' StatusReport.fingerprint ("" when it has none)."""
        window = str(effective_window)
        self.model_info.labels(self.variant, fingerprint, weight_status, window, checkpoint).set(1)

    def record_step(self, decode_batch: int, blocks: BlockCounts) -> None:
        """The engine's step observer (called on the engine thread)."""
        if decode_batch:
            self.decode_batch.labels(self.variant).observe(decode_batch)
        self.bias_blocks.labels(self.variant, "computed").inc(blocks.computed)
        self.bias_blocks.labels(self.variant, "skipped").inc(blocks.skipped)

    def count(self, code: int) -> None:
        self.requests.labels(self.variant, str(code)).inc()

    def timer(self, arrived: float, prompt_tokens: int, segment: str = "") -> RequestTimer:
        """`segment`: the request's SEGMENT_HEADER ("" when it did not come through the gateway)."""
        return RequestTimer(self, arrived, prompt_tokens, self._segment_label(segment))

    def _segment_label(self, segment: str) -> str:
        """The header as a label, bounded: anyone who reaches the server directly can send it, and each
        new value is a new set of series, so odd values and any past MAX_SEGMENTS read `other`."""
        if segment in self._segments:
            return segment
        if not _SEGMENT.fullmatch(segment) or len(self._segments) >= MAX_SEGMENTS:
            return "other"
        self._segments.add(segment)
        return segment


class RequestTimer:
    """One accepted request's latencies and tokens, observed as its tokens arrive."""

    def __init__(self, metrics: ServerMetrics, arrived: float, prompt_tokens: int, segment: str = "") -> None:
        """`arrived`: time.monotonic() when the request came in."""
        self.metrics = metrics
        self.prompt_tokens = prompt_tokens
        self.segment = segment
        self.arrived = arrived
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.generated = 0
        metrics.tokens.labels(metrics.variant, "prompt").inc(prompt_tokens)

    def token(self) -> None:
        now = time.monotonic()
        variant = self.metrics.variant
        if self.last_token is None:
            self.first_token = now
            bucket = prompt_bucket(self.prompt_tokens)
            self.metrics.ttft.labels(variant, self.segment, bucket).observe(now - self.arrived)
        else:
            self.metrics.inter_token.labels(variant, self.segment).observe(now - self.last_token)
        self.last_token = now
        self.generated += 1
        self.metrics.tokens.labels(variant, "generated").inc()

    def finish(self, code: int) -> None:
        if self.generated >= 2 and self.first_token is not None and self.last_token is not None:
            mean_gap = (self.last_token - self.first_token) / (self.generated - 1)
            self.metrics.time_per_token.labels(self.metrics.variant, self.segment).observe(mean_gap)
        if code == 200:
            self.metrics.e2e.labels(self.metrics.variant).observe(time.monotonic() - self.arrived)
        self.metrics.count(code)
