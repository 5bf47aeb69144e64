"""The probe's metric families (their names: inference/families.py), on the probe's own registry."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inference import families
from inference.weights import WeightStatus
from probes.loaded import Comparison, LoadedCheck
from probes.synthetic import ProbeCheck

# TTFT edges include the 2 s objective; the rest follows vLLM's TTFT buckets.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0)


@dataclass
class ProbeMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self._mismatch_shown: tuple[str, str] | None = None
        self.weight_status = Gauge(
            families.PROBE_WEIGHT_STATUS,
            "1 on the pod's current weight status",
            ["variant", "status"],
            registry=r,
        )
        self.weight_checks = Counter(
            families.PROBE_WEIGHT_CHECKS,
            "Weight-file checks, by the status found",
            ["variant", "status"],
            registry=r,
        )
        self.weight_check_seconds = Histogram(
            families.PROBE_WEIGHT_CHECK_SECONDS,
            "Time to read the checkpoint header and bias tensors",
            ["variant"],
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
            registry=r,
        )
        self.ttft = Histogram(
            families.PROBE_TTFT,
            "Synthetic request: time to its first event carrying generated text (not the first byte: "
            "keep-alive pings and role-only chunks do not count)",
            ["variant"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            families.PROBE_E2E,
            "Synthetic request: end to end, to the end of a complete stream",
            ["variant"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            families.PROBE_REQUESTS, "Synthetic requests, by result", ["variant", "result"], registry=r
        )
        self.fingerprint_match = Gauge(
            families.PROBE_FINGERPRINT_MATCH,
            "1 when the server's fingerprint header has the variant's expected suffix; absent when "
            "the check is off (graystack_probe_info)",
            ["variant"],
            registry=r,
        )
        self.info = Gauge(
            families.PROBE_INFO,
            "What the probe measures: the API its synthetic request speaks, the response header its "
            "fingerprint check reads (off: none), and how it compares the file with what the server "
            "loaded (loaded_check: model-info, system-fingerprint or off)",
            ["variant", "api", "fingerprint_header", "loaded_check"],
            registry=r,
        )
        self.server_mismatch = Gauge(
            families.PROBE_SERVER_MISMATCH,
            "1 while the server did not load the checkpoint the probe reads, `reason` saying how they "
            'differ; 0 (reason "") while they agree; absent while they cannot be compared (the '
            "file unreadable, the server unreachable or not saying) or loaded_check is off",
            ["variant", "reason"],
            registry=r,
        )

    def describe(self, check: ProbeCheck, loaded: LoadedCheck) -> None:
        header = check.fingerprint_header or "off"
        self.info.labels(check.variant, check.api.value, header, loaded.value).set(1)

    def show_comparison(self, variant: str, comparison: Comparison) -> None:
        """Only the current comparison's series: the new one is set before the stale one goes, so no
        scrape in between sees neither."""
        shown = None
        if comparison.agrees is not None:
            shown = (variant, "" if comparison.agrees else comparison.reason)
            self.server_mismatch.labels(*shown).set(0 if comparison.agrees else 1)
        if self._mismatch_shown not in (None, shown):
            self.server_mismatch.remove(*self._mismatch_shown)
        self._mismatch_shown = shown

    def set_status(self, variant: str, current: WeightStatus) -> None:
        for status in WeightStatus:
            self.weight_status.labels(variant, status.value).set(1 if status == current else 0)
