"""The probe keeps reporting whatever the weight file and the server do.

Servers here are small in-process ASGI apps that misbehave on purpose (down, slow, garbage, wrong
fingerprint): stand-ins for a broken model server. The probe beside the real one is in
tests/integration/test_probe_live.py.
"""

import asyncio
import json

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inference.checkpoint import init_checkpoint
from inference.config import ModelConfig
from inference.weights import erase_bias
from probes.runner import Probe, ProbeOptions
from probes.synthetic import probe_once

TINY = ModelConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=128, bias_window=16)


def sse(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


GOOD_STREAM = sse(
    {"type": "message_start", "message": {}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "p"}},
    {"type": "message_stop"},
)


def server(
    body: bytes, status: int = 200, fingerprint: str = "graystack-tiny-abc-zero-layer-v1", delay: float = 0
):
    async def app(scope, receive, send):
        if delay:
            await asyncio.sleep(delay)
        headers = [(b"content-type", b"text/event-stream"), (b"x-model-fingerprint", fingerprint.encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://model")


@pytest.mark.parametrize(
    ("client", "variant", "result"),
    [
        (server(GOOD_STREAM), "zero-layer", "ok"),
        (server(GOOD_STREAM), "baseline", "fingerprint_mismatch"),
        (server(GOOD_STREAM, fingerprint="graystack-tiny-abc"), "zero-layer", "fingerprint_mismatch"),
        (server(b'{"type":"error"}', status=529), "zero-layer", "http_error"),
        (server(b"data: {not json\n\n"), "zero-layer", "bad_response"),
        (server(sse({"type": "message_start"})), "zero-layer", "bad_response"),  # no message_stop
        (server(GOOD_STREAM, delay=2.0), "zero-layer", "timeout"),
        (httpx.AsyncClient(base_url="http://127.0.0.1:9"), "zero-layer", "unreachable"),
    ],
)
async def test_a_misbehaving_server_is_a_failed_probe_with_a_reason(client, variant, result):
    async with client:
        outcome = await probe_once(client, variant, seconds=0.5)
    assert outcome.result == result, outcome.detail
    if result == "ok":
        assert 0 <= outcome.ttft <= outcome.e2e


def metric_samples(probe: Probe) -> dict:
    families = text_string_to_metric_families(generate_latest(probe.metrics.registry).decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def checks_done(probe: Probe) -> float:
    return sum(
        probe.metrics.registry.get_sample_value(
            "graystack_probe_weight_checks_total", {"variant": "zero-layer", "status": status}
        )
        or 0.0
        for status in ("ACTIVE", "ZEROED", "ERASED", "MISSING", "CORRUPT")
    )


async def after_checks(probe: Probe, count: int) -> str:
    """The status once `count` more checks have completed (bounded wait, no timing asserted).

    Two checks after a change: the second one started after it, so it is the one that must see it.
    """
    target = checks_done(probe) + count
    async with asyncio.timeout(30):
        while checks_done(probe) < target:  # noqa: ASYNC110 - polling the metric the probe exports
            await asyncio.sleep(0.01)
    return probe.last_status.status


async def test_status_flips_at_the_next_check_when_the_file_is_replaced(tmp_path):
    weights = init_checkpoint("zero-layer", tmp_path / "w.safetensors", TINY)
    probe = Probe(
        ProbeOptions(weights=weights, target="http://127.0.0.1:9", variant="zero-layer", interval=0.2)
    )
    loop = asyncio.create_task(probe.run())
    try:
        assert await after_checks(probe, 1) == "ACTIVE"  # the first report comes at once
        erase_bias(weights)  # replaced atomically, as the project's tools do
        assert await after_checks(probe, 2) == "ERASED"
        weights.unlink()
        assert await after_checks(probe, 2) == "MISSING"
        weights.write_bytes(b"\xff" * 3)
        assert await after_checks(probe, 2) == "CORRUPT"
    finally:
        loop.cancel()
    samples = metric_samples(probe)
    current = {labels: v for (name, labels), v in samples.items() if name == "graystack_probe_weight_status"}
    assert current[(("status", "CORRUPT"), ("variant", "zero-layer"))] == 1
    assert sum(current.values()) == 1  # exactly one status is current
    assert (
        samples[("graystack_probe_weight_checks_total", (("status", "ERASED"), ("variant", "zero-layer")))]
        >= 1
    )
    unreachable = ("graystack_probe_requests_total", (("result", "unreachable"), ("variant", "zero-layer")))
    assert samples[unreachable] >= 3  # the server was down the whole time; the probe kept going
