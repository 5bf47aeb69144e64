"""The probe keeps reporting whatever the weight file and the server do.

Servers here are small in-process ASGI apps that misbehave on purpose (down, slow, garbage, wrong
fingerprint) or speak as servers nobody here wrote do (OpenAI chunks with a role-only first chunk,
a stream that closes without `data: [DONE]`, no fingerprint header). The probe beside the real
model server is in tests/integration/test_probe_live.py; beside a served stand-in, in
tests/integration/test_probe_any_server.py.
"""

import asyncio
import json

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graystack.cli import main
from graystack.local.standin import read_body
from inference.checkpoint import init_checkpoint
from inference.config import ModelConfig
from inference.weights import erase_bias
from probes.app import create_probe_app
from probes.runner import Probe, ProbeOptions
from probes.synthetic import ProbeCheck, probe_once
from probes.wire import Api

TINY = ModelConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=128, bias_window=16)


def sse(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def chunks(*deltas: dict, finish: str | None = "stop", done: bool = True) -> bytes:
    """An OpenAI chat stream: a role-only first chunk (as vLLM and graystack send), `deltas`, a chunk
    with the finish_reason (none when `finish` is None), then `data: [DONE]` only when `done`."""
    bodies = [{"role": "assistant", "content": ""}, *deltas]
    lines = [{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]} for d in bodies]
    if finish:
        lines.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    text = "".join(f"data: {json.dumps(line)}\n\n" for line in lines) + (": ping\n\n" if deltas else "")
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


GOOD_STREAM = sse(
    {"type": "message_start", "message": {}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "p"}},
    {"type": "message_stop"},
)
OPENAI_NO_DONE = chunks({"content": "p"}, done=False)  # transformers serve: the connection just closes
ZERO_LAYER = "graystack-tiny-abc-zero-layer-v1"
LISTED = "/models/tiny-llama"  # transformers serve lists a local model by its directory


def server(
    body: bytes,
    status: int = 200,
    headers: dict | None = None,
    delay: float = 0,
    models: int = 200,
    seen: list | None = None,
):
    """A stand-in that streams `body` on any POST and lists LISTED on GET /v1/models; `seen` collects
    each request as (method, path, headers, JSON body)."""
    headers = {"x-model-fingerprint": ZERO_LAYER} if headers is None else headers

    async def app(scope, receive, send):
        body_in = await read_body(receive)
        if seen is not None:
            seen.append(
                (scope["method"], scope["path"], dict(scope["headers"]), json.loads(body_in or b"null"))
            )
        if scope["method"] == "GET":
            listing = json.dumps({"data": [{"id": LISTED}]}).encode() if models == 200 else b"{}"
            await send({"type": "http.response.start", "status": models, "headers": []})
            await send({"type": "http.response.body", "body": listing})
            return
        if delay:
            await asyncio.sleep(delay)
        raw = [(b"content-type", b"text/event-stream")] + [
            (k.encode(), v.encode()) for k, v in headers.items()
        ]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://model")


def check(variant: str = "zero-layer", api: Api = Api.ANTHROPIC, **fields) -> ProbeCheck:
    return ProbeCheck(variant, api, **{"model": "m", **fields})


OFF = {"fingerprint_header": None}


@pytest.mark.parametrize(
    ("client", "probe", "result"),
    [
        (server(GOOD_STREAM), check(), "ok"),
        (server(GOOD_STREAM), check("baseline"), "fingerprint_mismatch"),
        (
            server(GOOD_STREAM, headers={"x-model-fingerprint": "graystack-tiny-abc"}),
            check(),
            "fingerprint_mismatch",
        ),
        (server(GOOD_STREAM, headers={}), check(), "fingerprint_mismatch"),  # the check is on: none sent
        (server(GOOD_STREAM, headers={}), check(**OFF), "ok"),
        (server(GOOD_STREAM, headers={"x-fp": ZERO_LAYER}), check(fingerprint_header="x-fp"), "ok"),
        (server(b'{"type":"error"}', status=529), check(), "http_error"),
        (server(sse({"type": "error", "error": {"type": "overloaded_error"}})), check(), "http_error"),
        (server(b"data: {not json\n\n"), check(), "bad_response"),
        (server(sse({"type": "message_start"})), check(), "bad_response"),  # no message_stop
        (server(GOOD_STREAM, delay=2.0), check(), "timeout"),
        (httpx.AsyncClient(base_url="http://127.0.0.1:9"), check(), "unreachable"),
        (server(OPENAI_NO_DONE, headers={}), check(api=Api.OPENAI, **OFF), "ok"),
        (server(chunks({"content": "p"}), headers={}), check(api=Api.OPENAI, **OFF), "ok"),
        (server(OPENAI_NO_DONE), check(api=Api.OPENAI), "ok"),  # graystack's header, checked
        (server(chunks({"content": "p"}, finish=None)), check(api=Api.OPENAI), "bad_response"),
        (server(chunks({"content": "p"}, finish=None, done=False)), check(api=Api.OPENAI), "bad_response"),
        (server(b'data: {"error": "boom"}\n\n'), check(api=Api.OPENAI), "http_error"),  # transformers'
        (
            server(b'data: {"error": {"message": "x"}}\n\ndata: [DONE]\n\n'),
            check(api=Api.OPENAI),
            "http_error",
        ),
        (server(OPENAI_NO_DONE, status=404), check(api=Api.OPENAI), "http_error"),
        (server(b"data: [1, 2]\n\n"), check(api=Api.OPENAI), "bad_response"),
    ],
)
async def test_a_misbehaving_server_is_a_failed_probe_with_a_reason(client, probe, result):
    async with client:
        outcome = await probe_once(client, probe, seconds=0.5)
    assert outcome.result == result, outcome.detail
    if result == "ok":
        assert 0 <= outcome.ttft <= outcome.e2e


@pytest.mark.parametrize(
    "body",
    [
        chunks(finish="length"),  # a role-only chunk and a finish: complete, but no content
        chunks({"content": ""}, {"role": "assistant"}, finish="length", done=False),
    ],
)
async def test_a_stream_without_generated_text_has_no_ttft(body):
    async with server(body) as client:
        outcome = await probe_once(client, check(api=Api.OPENAI), seconds=5)
    assert outcome.result == "ok", outcome.detail
    assert outcome.ttft is None
    assert outcome.e2e is not None


@pytest.mark.parametrize(
    ("api", "path", "body", "version"),
    [
        (Api.ANTHROPIC, "/v1/messages", GOOD_STREAM, "2023-06-01"),
        (Api.OPENAI, "/v1/chat/completions", OPENAI_NO_DONE, None),
    ],
)
async def test_the_request_is_the_apis_own_for_the_model_the_server_lists(api, path, body, version):
    seen = []
    async with server(body, seen=seen) as client:
        first = await probe_once(client, check(api=api, model=""), seconds=5)
    assert first.result == "ok", first.detail
    (list_method, list_path, list_headers, _), (method, sent_path, headers, sent) = seen
    assert (list_method, list_path, method, sent_path) == ("GET", "/v1/models", "POST", path)
    assert sent["model"] == first.model == LISTED
    assert sent["stream"] is True
    assert sent["messages"][0]["role"] == "user"
    assert (headers.get(b"anthropic-version", b"").decode() or None) == version
    assert (list_headers.get(b"anthropic-version", b"").decode() or None) == version


async def test_a_server_without_a_model_list_asks_for_the_model_by_name():
    async with server(GOOD_STREAM, models=404) as client:
        outcome = await probe_once(client, check(model=""), seconds=5)
    assert outcome.result == "http_error"
    assert "--model" in outcome.detail


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


@pytest.mark.parametrize(("header", "shown"), [(None, "off"), ("x-model-fingerprint", "x-model-fingerprint")])
async def test_the_metrics_say_what_the_probe_measures(tmp_path, header, shown):
    seen = []
    options = ProbeOptions(
        weights=tmp_path / "none.safetensors",
        target="http://model",
        variant="zero-layer",
        api=Api.OPENAI,
        fingerprint_header=header,
    )
    probe = Probe(options)
    async with server(OPENAI_NO_DONE, seen=seen) as client:
        for _ in range(2):
            assert (await probe.probe_server(client)).result == "ok"
    assert [path for _, path, _, _ in seen] == ["/v1/models", "/v1/chat/completions", "/v1/chat/completions"]
    samples = metric_samples(probe)
    info = {
        "api": "openai",
        "fingerprint_header": shown,
        "loaded_check": "model-info",
        "variant": "zero-layer",
    }
    assert samples[("graystack_probe_info", tuple(sorted(info.items())))] == 1
    match = samples.get(("graystack_probe_fingerprint_match", (("variant", "zero-layer"),)))
    assert match == (None if header is None else 1)
    assert samples[("graystack_probe_ttft_seconds_count", (("variant", "zero-layer"),))] == 2
    health = create_probe_app(probe)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=health), base_url="http://p") as client:
        reported = (await client.get("/healthz")).json()
    assert (reported["api"], reported["model"], reported["fingerprint_header"]) == ("openai", LISTED, header)
    assert reported["last_probe"] == "ok"


@pytest.mark.parametrize(
    ("flags", "header"),
    [
        ([], "x-model-fingerprint"),
        (["--fingerprint-header", ""], None),
        (["--fingerprint-header", "none"], None),
        (["--fingerprint-header", "x-fp"], "x-fp"),
    ],
)
def test_the_cli_names_the_fingerprint_header_or_turns_the_check_off(monkeypatch, tmp_path, flags, header):
    started = []

    async def serve_probe(probe: Probe, host: str, port: int) -> None:
        started.append(probe.check)

    monkeypatch.setattr("probes.app.serve_probe", serve_probe)
    args = ["probe", "--weights", str(tmp_path / "w"), "--target", "http://m", "--variant", "zero-layer"]
    result = CliRunner().invoke(main, [*args, *flags], env={"GRAYSTACK_PROBE_API": "openai"})
    assert result.exit_code == 0, result.output
    assert started == [ProbeCheck("zero-layer", Api.OPENAI, "", header)]
