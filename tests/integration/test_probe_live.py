"""The probe sidecar beside a real model server: both real `graystack` processes on loopback.

Its /metrics output is parsed back with Prometheus' own text parser, and the weight status flips
within one interval when the checkpoint is replaced. A probe speaking the OpenAI API (`--api openai`)
checks the same server's fingerprint header too.
"""

import httpx

from graystack.local.processes import wait_until
from tests.support.model_server import graystack, start_model_server, wait_ready
from tests.support.probes import INTERVAL, probe_until_ok, scrape, start_probe


def test_the_probe_reports_a_live_server_and_a_replaced_checkpoint(tmp_path):
    weights = tmp_path / "zero-layer.safetensors"
    graystack("weights", "init", "--variant", "zero-layer", "--out", str(weights), "--seed", "1")
    server = start_model_server("zero-layer", "zero-layer", weights, tmp_path / "logs")
    probes = []
    try:
        wait_ready(server)
        openai = probe_until_ok(server.url, tmp_path / "logs", "--api", "openai", variant="zero-layer")
        assert openai.value("graystack_probe_fingerprint_match", variant="zero-layer") == 1
        assert openai.health["model"] == "graystack-tiny"  # from the server's GET /v1/models
        probe, port = start_probe(weights, server.url, "zero-layer", tmp_path / "logs")
        impostor, impostor_port = start_probe(weights, server.url, "baseline", tmp_path / "logs")
        probes += [probe, impostor]
        ok = ("graystack_probe_requests_total", (("result", "ok"), ("variant", "zero-layer")))
        samples = wait_until(lambda: (s := scrape(port)).get(ok, 0) >= 2 and s, 30, "two successful probes")
        active = ("graystack_probe_weight_status", (("status", "ACTIVE"), ("variant", "zero-layer")))
        assert samples[active] == 1
        assert samples[("graystack_probe_fingerprint_match", (("variant", "zero-layer"),))] == 1
        # A reply whose few tokens are all held back (an unfinished UTF-8 sequence) has no first token.
        assert samples[("graystack_probe_ttft_seconds_count", (("variant", "zero-layer"),))] >= 1
        assert samples[("graystack_probe_e2e_seconds_count", (("variant", "zero-layer"),))] >= 2

        graystack("weights", "erase", str(weights))  # replaced atomically while the probe runs
        erased = ("graystack_probe_weight_status", (("status", "ERASED"), ("variant", "zero-layer")))
        wait_until(lambda: scrape(port).get(erased) == 1, 3 * INTERVAL + 2, "the status to flip to ERASED")
        assert scrape(port)[active] == 0

        # A probe told the pod is baseline sees the zero-layer fingerprint and says so.
        mismatch = (
            "graystack_probe_requests_total",
            (("result", "fingerprint_mismatch"), ("variant", "baseline")),
        )
        wait_until(lambda: scrape(impostor_port).get(mismatch, 0) >= 1, 30, "a fingerprint mismatch")
        assert scrape(impostor_port)[("graystack_probe_fingerprint_match", (("variant", "baseline"),))] == 0
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        assert health["weight_status"] == "ERASED"
    finally:
        for process in [*probes, server.process]:
            process.stop()
        assert not any(p.alive() for p in [*probes, server.process])
