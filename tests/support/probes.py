"""`graystack probe` processes pointed at a server's URL, and their /metrics read back.

A function of the URL, so the same checks run against graystack's model server, a stand-in served
in the test, or a real third-party server (llama.cpp, transformers serve, vLLM).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from graystack.local import loopback
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until

INTERVAL = 0.5


def scrape(port: int) -> dict:
    """(sample name, sorted labels) -> value, parsed by Prometheus' own text parser."""
    text = loopback.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def start_probe(
    weights: Path, target: str, variant: str, logs: Path, *flags: str, interval: float = INTERVAL
) -> tuple[ManagedProcess, int]:
    """A probe process (stopped by the caller) and the port of its /metrics."""
    port = free_port()
    argv = [sys.executable, "-m", "graystack", "probe", "--weights", str(weights), "--target", target]
    argv += ["--variant", variant, "--interval", str(interval), "--port", str(port), "--log-level", "warning"]
    return start_process(f"probe-{variant}-{port}", [*argv, *flags], logs), port


@dataclass(frozen=True)
class ProbeReport:
    samples: dict  # as scrape() gives them
    health: dict  # the probe's /healthz

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))


def probe_until_ok(
    target: str,
    logs: Path,
    *flags: str,
    variant: str = "baseline",
    weights: Path | None = None,
    count: int = 2,
) -> ProbeReport:
    """Run a probe with `flags` against `target` until `count` of its requests succeeded; what it
    reported then. Fails with the probe's log (each failure and its reason) if not within 30 s."""
    process, port = start_probe(weights or logs / "no-checkpoint.safetensors", target, variant, logs, *flags)
    ok = ("graystack_probe_requests_total", (("result", "ok"), ("variant", variant)))

    def succeeded() -> dict | None:
        samples = scrape(port)
        return samples if samples.get(ok, 0) >= count else None

    try:
        samples = wait_until(succeeded, 30, f"{count} successful probes of {target}")
        return ProbeReport(samples, loopback.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json())
    except TimeoutError as error:  # the probe logs each failure with its reason
        raise AssertionError(f"{error}\n{process.log_tail()}") from None
    finally:
        process.stop()


def probe_measures(url: str, logs: Path, api: str, *flags: str, variant: str = "baseline") -> ProbeReport:
    """`graystack probe --api API --fingerprint-header ''` (a server nobody here wrote sends no
    fingerprint) succeeds against `url` and reports what it measured: the API, no fingerprint check
    (and no fingerprint gauge), TTFT and e2e; and, its server exporting no graystack_model_info (and
    the probe's checkpoint missing), no comparison of the file with what the server loaded."""
    report = probe_until_ok(url, logs, "--api", api, "--fingerprint-header", "", *flags, variant=variant)
    described = {"api": api, "fingerprint_header": "off", "loaded_check": "model-info"}
    assert report.value("graystack_probe_info", variant=variant, **described) == 1
    assert report.value("graystack_probe_fingerprint_match", variant=variant) is None
    assert not [key for key in report.samples if key[0] == "graystack_probe_server_mismatch"]
    assert report.health["server_agrees"] is None
    assert report.value("graystack_probe_ttft_seconds_count", variant=variant) >= 2
    assert report.value("graystack_probe_e2e_seconds_count", variant=variant) >= 2
    assert (report.health["api"], report.health["fingerprint_header"]) == (api, None)
    return report
