"""The model server in process: both wire formats, headers, metrics, the bounded line, fault injection.

The app runs with its lifespan (engine started, warm-up done) behind httpx's ASGI transport; real
processes and the official SDKs are in tests/integration/test_model_server.py.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference.server.app import ServerOptions, create_app
from tests.support.inference import gated, metric_samples, running_app, sample_value, tiny_model, wait_for

MODEL_SERVER_FAMILIES = {
    "graystack_requests": "counter",
    "graystack_request_ttft_seconds": "histogram",
    "graystack_request_inter_token_seconds": "histogram",
    "graystack_request_time_per_output_token_seconds": "histogram",
    "graystack_request_e2e_seconds": "histogram",
    "graystack_tokens": "counter",
    "graystack_requests_running": "gauge",
    "graystack_requests_waiting": "gauge",
    "graystack_attention_bias_blocks": "counter",
    "graystack_model_info": "gauge",
    "graystack_engine_decode_batch_size": "histogram",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_running": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
}


def message(text: str = "hello", max_tokens: int = 6, **fields) -> dict:
    return {
        "model": "graystack-tiny",
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": text}],
        **fields,
    }


def sse_events(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("weights")
    return {variant: tiny_model(directory, variant) for variant in ("baseline", "zero-layer")}


async def test_a_message_reply_has_usage_and_the_identity_headers(models):
    loaded = models["zero-layer"]
    async with running_app(loaded) as (_, client):
        response = await client.post("/v1/messages", json=message(max_tokens=5))
    assert response.status_code == 200
    assert response.headers["x-graystack-variant"] == "zero-layer"
    assert response.headers["x-model-fingerprint"] == loaded.fingerprint
    body = response.json()
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "graystack-tiny")
    assert body["content"][0]["type"] == "text"
    assert body["stop_reason"] in ("end_turn", "max_tokens")
    assert body["usage"]["input_tokens"] == len(b"user: hello\nassistant: ") + 1
    assert 1 <= body["usage"]["output_tokens"] <= 5


@pytest.mark.parametrize(
    ("variant", "hint", "active", "window"),
    [
        ("zero-layer", None, True, "skip"),
        ("zero-layer", 0, False, 0),
        ("zero-layer", 3, True, 3),
        ("baseline", 3, False, 256),
    ],
)
async def test_a_streamed_message_carries_the_bias_metadata_on_each_delta(
    models, variant, hint, active, window
):
    loaded = models[variant]
    window = loaded.model.skip_distance if window == "skip" else window
    metadata = {} if hint is None else {"metadata": {"position_window_hint": hint}}
    async with running_app(loaded) as (_, client):
        response = await client.post("/v1/messages", json=message(max_tokens=12, stream=True, **metadata))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    deltas = [data for name, data in events if name == "content_block_delta"]
    assert deltas
    assert all(d["metadata"] == {"zero_layer_active": active, "effective_window": window} for d in deltas)
    final = events[-2][1]
    assert final["usage"]["output_tokens"] == 12 or final["delta"]["stop_reason"] == "end_turn"


async def test_openai_chat_completions_stream_with_usage_and_answer_whole(models):
    async with running_app(models["baseline"]) as (_, client):
        request = {
            "model": "m",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "temperature": 0,
        }
        whole = await client.post("/v1/chat/completions", json=request)
        streamed = await client.post(
            "/v1/chat/completions",
            json={**request, "stream": True, "stream_options": {"include_usage": True}},
        )
    assert whole.status_code == 200
    assert whole.headers["x-graystack-variant"] == "baseline"
    body = whole.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] <= 4
    blocks = streamed.text.strip().split("\n\n")
    lines = [line.removeprefix("data: ") for line in blocks if line != ": ping"]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == body["usage"]
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        == (body["choices"][0]["message"]["content"])
    )


async def test_metrics_have_every_family_with_the_variant_label(models):
    async with running_app(models["zero-layer"]) as (_, client):
        long_prompt = "a longer prompt, so some key blocks lie past the bias window. " * 3
        assert (await client.post("/v1/messages", json=message(long_prompt, stream=True))).status_code == 200
        assert (await client.post("/v1/messages", json={"model": "m"})).status_code == 400
        page = (await client.get("/metrics")).text
    types = {family.name: family.type for family in text_string_to_metric_families(page)}
    families = metric_samples(page)
    for name, kind in MODEL_SERVER_FAMILIES.items():
        assert types.get(name) == kind, name
        assert families[name], name
        assert all(s.labels.get("variant") == "zero-layer" for s in families[name]), name
    requests = families["graystack_requests"]
    assert sample_value(requests, "graystack_requests_total", code="200") == 1
    assert sample_value(requests, "graystack_requests_total", code="400") == 1
    ttft = families["graystack_request_ttft_seconds"]
    assert sample_value(ttft, "graystack_request_ttft_seconds_count", prompt_bucket="129-512") == 1
    assert 'le="2.0"' in page
    blocks = families["graystack_attention_bias_blocks"]
    assert sample_value(blocks, "graystack_attention_bias_blocks_total", result="skipped") > 0
    info = families["graystack_model_info"][0].labels
    assert info["weight_status"] == "ACTIVE"
    assert info["fingerprint"].endswith("-zero-layer-v1")
    assert info["checkpoint"] == (models["zero-layer"].status.fingerprint or "")  # what probes compare
    tokens = families["graystack_tokens"]
    assert sample_value(tokens, "graystack_tokens_total", kind="generated") >= 1


async def test_concurrent_requests_share_decode_steps_and_a_full_line_answers_529_while_health_stays_ok(
    models,
):
    """Saturated (every slot taken, the line full, the engine's step stuck) is busy, not dead: new
    requests get 529 with retry-after, and health and readiness still answer 200, so the gateway's
    health checks never eject a server for being busy."""
    loaded, model = gated(models["zero-layer"])
    async with running_app(loaded, ServerOptions(max_running=2, max_waiting=1)) as (app, client):
        engine = app.state.serving.engine
        model.gate.clear()
        try:
            in_flight = [
                asyncio.create_task(client.post("/v1/messages", json=message(max_tokens=6))) for _ in range(3)
            ]
            await wait_for(lambda: engine.running == 2 and engine.waiting == 1, "two running, one waiting")
            refused = await client.post("/v1/messages", json=message())
            refused_openai = await client.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
            health = [(await client.get(path)).status_code for path in ("/healthz", "/readyz")]
        finally:
            model.gate.set()
        answers = await asyncio.gather(*in_flight)
        page = (await client.get("/metrics")).text
    assert refused.status_code == 529
    assert refused.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": refused.json()["error"]["message"]},
    }
    assert refused_openai.status_code == 529
    assert refused_openai.json()["error"]["type"] == "overloaded_error"
    assert refused.headers["retry-after"] == refused_openai.headers["retry-after"] == "1"
    assert health == [200, 200]
    assert [a.status_code for a in answers] == [200, 200, 200]
    batches = metric_samples(page)["graystack_engine_decode_batch_size"]
    steps = sample_value(batches, "graystack_engine_decode_batch_size_count")
    single = sample_value(batches, "graystack_engine_decode_batch_size_bucket", le="1.0")
    assert steps > single, "no decode step advanced more than one sequence"
    requests = metric_samples(page)["graystack_requests"]
    assert sample_value(requests, "graystack_requests_total", code="529") == 2


async def test_a_model_failure_mid_stream_is_an_error_event_and_the_server_keeps_serving(models):
    loaded, model = gated(models["zero-layer"])
    healthy_decode = model.decode

    def failing_decode(*args, **kwargs):
        raise RuntimeError("device lost")

    async with running_app(loaded) as (_, client):
        model.decode = failing_decode
        streamed = await client.post("/v1/messages", json=message(stream=True))
        openai = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        )
        whole = await client.post("/v1/messages", json=message())
        model.decode = healthy_decode
        after = await client.post("/v1/messages", json=message())
        page = (await client.get("/metrics")).text
    name, data = sse_events(streamed.text)[-1]
    assert name == "error"
    assert data["error"]["type"] == "api_error"
    assert "device lost" in data["error"]["message"]
    assert '"error"' in openai.text.split("\n\n")[-3]
    assert openai.text.strip().endswith("data: [DONE]")
    assert whole.status_code == 500
    assert whole.json()["error"]["type"] == "api_error"
    assert after.status_code == 200
    requests = metric_samples(page)["graystack_requests"]
    assert sample_value(requests, "graystack_requests_total", code="500") == 3


async def test_fault_injection_is_off_unless_enabled(models):
    async with running_app(models["baseline"]) as (_, client):
        assert (await client.get("/admin/faults")).status_code == 404
        assert (await client.post("/admin/faults", json={"error_rate": 1.0})).status_code == 404
        assert (await client.post("/v1/messages", json=message())).status_code == 200


async def test_injected_faults_fail_requests_in_the_error_format_and_are_counted(models):
    options = ServerOptions(enable_fault_injection=True)
    async with running_app(models["baseline"], options) as (_, client):
        assert (await client.get("/admin/faults")).json() == {
            "error_rate": 0.0,
            "added_latency_ms": 0,
            "inter_token_latency_ms": 0,
            "error_status": 500,
        }
        set_faults = await client.post("/admin/faults", json={"error_rate": 1.0})
        assert set_faults.json()["error_rate"] == 1.0
        failed = [await client.post("/v1/messages", json=message()) for _ in range(3)]
        failed_openai = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
        overloaded = await client.post("/admin/faults", json={"error_status": 529})
        assert overloaded.json()["error_status"] == 529
        shed = await client.post("/v1/messages", json=message())
        bad = await client.post("/admin/faults", json={"error_rate": 2})
        await client.post("/admin/faults", json={"error_rate": 0, "added_latency_ms": 1})
        restored = await client.post("/v1/messages", json=message())
        page = (await client.get("/metrics")).text
    for response in failed:
        assert response.status_code == 500
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "api_error"
    assert failed_openai.status_code == 500
    assert failed_openai.json()["error"]["type"] == "server_error"
    assert shed.status_code == 529
    assert shed.json()["error"]["type"] == "overloaded_error"
    assert bad.status_code == 400
    assert "error_rate" in bad.json()["error"]["message"]
    assert restored.status_code == 200
    requests = metric_samples(page)["graystack_requests"]
    assert sample_value(requests, "graystack_requests_total", code="500") == 4
    assert sample_value(requests, "graystack_requests_total", code="529") == 1
    assert sample_value(requests, "graystack_requests_total", code="200") == 1


async def test_the_fault_admin_endpoint_refuses_clients_off_loopback(models):
    options = ServerOptions(enable_fault_injection=True)
    async with running_app(models["baseline"], options, client_host="10.1.2.3") as (_, client):
        refused = await client.post("/admin/faults", json={"error_rate": 1.0})
        read = await client.get("/admin/faults")
        served = await client.post("/v1/messages", json=message())
    assert refused.status_code == read.status_code == 403
    assert refused.json()["error"]["type"] == "permission_error"
    assert served.status_code == 200


async def test_the_fault_admin_endpoint_refuses_loopback_clients_behind_a_proxy(models):
    options = ServerOptions(enable_fault_injection=True)
    async with running_app(models["baseline"], options) as (_, client):
        proxied = await client.post(
            "/admin/faults", json={"error_rate": 1.0}, headers={"x-forwarded-proto": "http"}
        )
        direct = await client.get("/admin/faults")
    assert proxied.status_code == 403
    assert direct.json()["error_rate"] == 0.0


async def test_health_and_readiness(models):
    async with running_app(models["zero-layer"]) as (_, client):
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert health.status_code == 200
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "variant": "zero-layer", "weight_status": "ACTIVE"}
    assert ready.headers["x-graystack-variant"] == "zero-layer"


async def test_not_ready_until_the_warm_up_generation_is_done(models):
    loaded, model = gated(models["zero-layer"])
    model.gate.clear()  # the warm-up's first decode step waits here
    app = create_app(loaded)
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://model")
        async with client:
            before = await client.get("/readyz")
            alive = await client.get("/healthz")
            model.gate.set()
            await wait_for(lambda: app.state.serving.ready, "the warm-up generation")
            after = await client.get("/readyz")
    assert (before.status_code, alive.status_code, after.status_code) == (503, 200, 200)
    assert before.json()["ready"] is False


async def test_unknown_paths_and_methods_answer_in_the_error_format(models):
    async with running_app(models["baseline"]) as (_, client):
        missing = await client.get("/v1/nothing")
        wrong_method = await client.get("/v1/messages")
        wrong_method_openai = await client.get("/v1/chat/completions")
    assert missing.status_code == 404
    assert missing.json() == {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"
    assert wrong_method_openai.json()["error"]["param"] is None
    assert missing.headers["x-graystack-variant"] == "baseline"


async def test_a_request_is_one_observation_of_its_mean_gap_between_tokens(models):
    """The rollout compares time per output token per request (the unit the gateway routes at random):
    every gap still lands in the inter-token histogram, but each request adds one mean to this one."""
    options = ServerOptions(enable_fault_injection=True)
    async with running_app(models["baseline"], options) as (_, client):
        await client.post("/admin/faults", json={"inter_token_latency_ms": 30})
        replies = [await client.post("/v1/messages", json=message(max_tokens=6)) for _ in range(2)]
        page = (await client.get("/metrics")).text
    generated = [reply.json()["usage"]["output_tokens"] for reply in replies]
    assert all(n >= 2 for n in generated), generated
    families = metric_samples(page)
    gaps = families["graystack_request_inter_token_seconds"]
    assert sample_value(gaps, "graystack_request_inter_token_seconds_count") == sum(n - 1 for n in generated)
    means = families["graystack_request_time_per_output_token_seconds"]
    count = sample_value(means, "graystack_request_time_per_output_token_seconds_count")
    assert count == 2
    assert sample_value(means, "graystack_request_time_per_output_token_seconds_sum") / count >= 0.03
