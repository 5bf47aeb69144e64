"""The probe compares the checkpoint it reads with what the server says it loaded (probes/loaded.py).

The server's side comes from what servers really send: a graystack model server's metrics registry
(`ServerMetrics.set_model`), and OpenAI chunks carrying `system_fingerprint` as vLLM, transformers
serve and llama.cpp send it. The file's side is a `StatusReport` as inference/weights makes it.
"""

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graystack.cli import main
from inference.server.telemetry import ServerMetrics
from inference.weights import StatusReport, WeightStatus
from probes.app import create_probe_app
from probes.loaded import Comparison, LoadedCheck, Unavailable, compare, served_model_info
from probes.runner import Probe, ProbeOptions
from probes.synthetic import ProbeCheck, ProbeResult, probe_once
from probes.wire import Api

ACTIVE_FP = "sha256:0123456789abcdef"
ERASED_FP = "sha256:fedcba9876543210"
MISMATCH = "graystack_probe_server_mismatch"


def report(status: WeightStatus = WeightStatus.ACTIVE, fingerprint: str | None = ACTIVE_FP) -> StatusReport:
    return StatusReport(status, "read", fingerprint=fingerprint)


def model_metrics(status: str, checkpoint: str, variant: str = "zero-layer") -> str:
    """A graystack model server's /metrics page, having loaded a checkpoint of `status`."""
    metrics = ServerMetrics(variant, "graystack-tiny")
    metrics.set_model("graystack-tiny-abc-zero-layer-v1", status, 16, checkpoint)
    return generate_latest(metrics.registry).decode()


def model_info(status: str, checkpoint: str, variant: str = "zero-layer"):
    return served_model_info(model_metrics(status, checkpoint, variant), "zero-layer")


def test_model_info_agrees_when_the_server_loaded_the_files_status_and_fingerprint():
    comparison = compare(LoadedCheck.MODEL_INFO, report(), model_info("ACTIVE", ACTIVE_FP))
    assert comparison.agrees is True
    assert ACTIVE_FP in comparison.reason


@pytest.mark.parametrize(
    ("file", "loaded", "named"),
    [
        (report(), ("ERASED", ERASED_FP), ["the file is ACTIVE " + ACTIVE_FP, "loaded ERASED " + ERASED_FP]),
        (report(), ("ACTIVE", ERASED_FP), ["the file is ACTIVE " + ACTIVE_FP, "loaded ACTIVE " + ERASED_FP]),
        (report(WeightStatus.ZEROED, ERASED_FP), ("ERASED", ERASED_FP), ["file is ZEROED", "loaded ERASED"]),
        (report(), ("ACTIVE", ""), [f"file is ACTIVE {ACTIVE_FP}", "loaded ACTIVE ''"]),
    ],
)
def test_model_info_differing_in_status_or_fingerprint_is_a_mismatch_naming_both(file, loaded, named):
    comparison = compare(LoadedCheck.MODEL_INFO, file, model_info(*loaded))
    assert comparison.agrees is False
    assert all(part in comparison.reason for part in named), comparison.reason


def test_a_server_that_names_no_checkpoint_is_judged_on_its_status():
    """A graystack server from before the `checkpoint` label: its weight status is all it says."""
    page = model_metrics("ERASED", ERASED_FP).replace(f'checkpoint="{ERASED_FP}",', "")
    assert "checkpoint=" not in page
    served = served_model_info(page, "zero-layer")
    assert compare(LoadedCheck.MODEL_INFO, report(WeightStatus.ERASED, ERASED_FP), served).agrees is True
    differs = compare(LoadedCheck.MODEL_INFO, report(), served)
    assert (differs.agrees, differs.reason) == (False, "the file is ACTIVE, the server loaded ERASED")


@pytest.mark.parametrize(
    ("page", "why"),
    [
        (
            model_metrics("ACTIVE", ACTIVE_FP, variant="baseline"),
            "no graystack_model_info for variant zero-layer",
        ),
        ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n", "no graystack_model_info"),
        ("graystack_model_info{variant=\n", "unreadable /metrics"),
    ],
    ids=["another-variant", "no-model-info", "unreadable"],  # the first page holds the process's live memory
)
def test_a_server_without_model_info_for_the_variant_is_not_compared(page, why):
    with pytest.raises(Unavailable, match=why) as raised:
        served_model_info(page, "zero-layer")
    comparison = compare(LoadedCheck.MODEL_INFO, report(), raised.value)
    assert comparison == Comparison(None, str(raised.value))


@pytest.mark.parametrize("status", [WeightStatus.MISSING, WeightStatus.CORRUPT, WeightStatus.UNSUPPORTED])
def test_an_unreadable_file_is_not_compared(status):
    comparison = compare(LoadedCheck.MODEL_INFO, StatusReport(status, "why"), model_info("ACTIVE", ""))
    assert (comparison.agrees, comparison.reason) == (None, f"the file is {status.value}: why")


def chunk(system_fingerprint=..., content: str = "", finish: str | None = None) -> dict:
    """An OpenAI chat chunk; `system_fingerprint` left out unless given."""
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]}
    body["choices"][0]["finish_reason"] = finish
    if system_fingerprint is not ...:
        body["system_fingerprint"] = system_fingerprint
    return body


def stream(*chunks: dict) -> bytes:
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


@pytest.mark.parametrize(
    ("chunks", "echoed"),
    [
        # vLLM --fingerprint-mode custom: the value on (at least) the final chunk
        ((chunk(None, "p"), chunk(ACTIVE_FP, finish="stop")), ACTIVE_FP),
        ((chunk(ACTIVE_FP, "p"), chunk("", finish="stop")), ACTIVE_FP),  # a later "" does not erase it
        ((chunk("", "p"), chunk("", finish="stop")), ""),  # transformers serve
        ((chunk("b6500-1a2b3c4", "p"), chunk(finish="stop")), "b6500-1a2b3c4"),  # llama.cpp
        ((chunk(content="p"), chunk(finish="stop")), None),  # a server that sends none
    ],
)
async def test_the_synthetic_stream_captures_the_echoed_system_fingerprint(chunks, echoed):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": stream(*chunks)})

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
        result = await probe_once(client, ProbeCheck("zero-layer", Api.OPENAI, "m", None), seconds=5)
    assert (result.result, result.system_fingerprint) == ("ok", echoed)


@pytest.mark.parametrize(
    ("echoed", "agrees", "shown"),
    [
        (ACTIVE_FP, True, "the server echoes the file's fingerprint"),
        ("", False, f"the server echoes system_fingerprint '', the file is ACTIVE {ACTIVE_FP}"),
        ("b6500-1a2b3c4", False, "the server echoes system_fingerprint 'b6500-1a2b3c4'"),
        (None, False, f"the server echoes no system_fingerprint, the file is ACTIVE {ACTIVE_FP}"),
    ],
)
def test_system_fingerprint_must_echo_the_files_fingerprint(echoed, agrees, shown):
    probe = Probe(options(LoadedCheck.SYSTEM_FINGERPRINT))
    comparison = probe.compare_loaded(report(), ProbeResult("ok", system_fingerprint=echoed), None)
    assert comparison.agrees is agrees
    assert shown in comparison.reason
    assert mismatch_series(probe) == {comparison.reason if not agrees else "": 0 if agrees else 1}


def test_a_failed_synthetic_request_is_not_compared():
    probe = Probe(options(LoadedCheck.SYSTEM_FINGERPRINT))
    failed = ProbeResult("unreachable", "ConnectError")
    assert probe.compare_loaded(report(), failed, None).agrees is None
    assert mismatch_series(probe) == {}


def options(check: LoadedCheck, api: Api = Api.OPENAI) -> ProbeOptions:
    return ProbeOptions(Path("w.safetensors"), "http://model", "zero-layer", api=api, loaded_check=check)


def mismatch_series(probe: Probe) -> dict[str, float]:
    """reason -> value of the probe's graystack_probe_server_mismatch series."""
    families = text_string_to_metric_families(generate_latest(probe.metrics.registry).decode())
    found = [s for f in families for s in f.samples if s.name == MISMATCH]
    assert all(s.labels["variant"] == "zero-layer" for s in found)
    return {s.labels["reason"]: s.value for s in found}


def model_server(pages: list[str]) -> httpx.AsyncClient:
    """A stand-in graystack model server whose /metrics answers each of `pages` in turn (the last one
    from then on; "" answers 404)."""

    async def app(scope, receive, send):
        page = pages.pop(0) if len(pages) > 1 else pages[0]
        await send({"type": "http.response.start", "status": 200 if page else 404, "headers": []})
        await send({"type": "http.response.body", "body": page.encode()})

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://model")


async def test_model_info_mismatch_shows_only_the_current_comparison_and_the_health_says_it():
    """agree (0), a mismatch (1, its reason), another mismatch (the stale reason gone), no model info
    (no series), and agree again."""
    probe = Probe(options(LoadedCheck.MODEL_INFO))
    ok = ProbeResult("ok")
    pages = [
        model_metrics("ACTIVE", ACTIVE_FP),
        model_metrics("ERASED", ERASED_FP),
        model_metrics("ZEROED", ERASED_FP),
        "",
        model_metrics("ACTIVE", ACTIVE_FP),
    ]
    seen = []
    async with model_server(pages) as client:
        for _ in range(5):
            probe.compare_loaded(report(), ok, await probe.read_served(client))
            seen.append(mismatch_series(probe))
    loaded = "the file is ACTIVE " + ACTIVE_FP + ", the server loaded {} " + ERASED_FP
    assert seen == [
        {"": 0},
        {loaded.format("ERASED"): 1},
        {loaded.format("ZEROED"): 1},
        {},  # GET /metrics: HTTP 404: not compared
        {"": 0},
    ]
    health = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_probe_app(probe)), base_url="http://p"
    )
    async with health:
        shown = (await health.get("/healthz")).json()
    assert (shown["loaded_check"], shown["server_agrees"]) == ("model-info", True)


async def test_off_compares_nothing():
    probe = Probe(options(LoadedCheck.OFF))
    async with model_server([model_metrics("ERASED", ERASED_FP)]) as client:
        served = await probe.read_served(client)
    assert served is None
    assert probe.compare_loaded(report(), ProbeResult("ok"), served) is None
    assert mismatch_series(probe) == {}


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ([], {}, LoadedCheck.MODEL_INFO),
        (["--api", "openai", "--loaded-check", "system-fingerprint"], {}, LoadedCheck.SYSTEM_FINGERPRINT),
        ([], {"GRAYSTACK_PROBE_LOADED_CHECK": "off"}, LoadedCheck.OFF),
    ],
)
def test_the_cli_chooses_the_loaded_check(monkeypatch, tmp_path, flags, env, expected):
    started = []

    async def serve_probe(probe: Probe, host: str, port: int) -> None:
        started.append(probe.options.loaded_check)

    monkeypatch.setattr("probes.app.serve_probe", serve_probe)
    args = ["probe", "--weights", str(tmp_path / "w"), "--target", "http://m", "--variant", "zero-layer"]
    result = CliRunner().invoke(main, [*args, *flags], env=env)
    assert result.exit_code == 0, result.output
    assert started == [expected]


def test_system_fingerprint_needs_the_openai_api(tmp_path):
    args = ["probe", "--weights", str(tmp_path / "w"), "--target", "http://m", "--variant", "zero-layer"]
    result = CliRunner().invoke(main, [*args, "--loaded-check", "system-fingerprint"])
    assert result.exit_code == 2
    assert "--api openai" in result.output
