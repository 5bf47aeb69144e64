"""What clients call besides generation: the models list in both APIs' shapes, token counting, and an
oversized body read to its end before the 413 (the model server in process; real processes and the
official SDKs are in tests/integration/test_model_server.py)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from inference.checkpoint import MODEL_NAME
from inference.server.body import MAX_BODY_BYTES, read_json_object
from inference.server.errors import ApiError
from tests.support.inference import running_app, tiny_model

ANTHROPIC = {"anthropic-version": "2023-06-01"}
TURNS = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello"}]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("weights"), "zero-layer")


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer k"}])
async def test_an_openai_caller_gets_the_openai_model_list(loaded, headers):
    async with running_app(loaded) as (_, client):
        listing = (await client.get("/v1/models", headers=headers)).json()
        one = await client.get(f"/v1/models/{MODEL_NAME}", headers=headers)
    assert listing["object"] == "list"
    [model] = listing["data"]
    assert model.keys() == {"id", "object", "created", "owned_by"}
    assert (model["id"], model["object"]) == (MODEL_NAME, "model")
    assert isinstance(model["created"], int)
    assert one.json() == model


@pytest.mark.parametrize("headers", [ANTHROPIC, {"x-api-key": "k"}])
async def test_an_anthropic_caller_gets_the_anthropic_model_list(loaded, headers):
    async with running_app(loaded) as (_, client):
        listing = (await client.get("/v1/models", headers=headers)).json()
        one = await client.get(f"/v1/models/{MODEL_NAME}", headers=headers)
    [model] = listing["data"]
    assert model.keys() == {"type", "id", "display_name", "created_at"}
    assert (model["type"], model["id"]) == ("model", MODEL_NAME)
    assert "zero-layer" in model["display_name"]
    assert model["created_at"].endswith("Z")
    assert (listing["has_more"], listing["first_id"], listing["last_id"]) == (False, MODEL_NAME, MODEL_NAME)
    assert one.json() == model


async def test_an_unknown_model_is_404_in_the_callers_format(loaded):
    async with running_app(loaded) as (_, client):
        openai = await client.get("/v1/models/gpt-nothing")
        anthropic = await client.get("/v1/models/claude-nothing", headers=ANTHROPIC)
    assert openai.status_code == anthropic.status_code == 404
    assert openai.json().keys() == {"error"}
    assert anthropic.json()["type"] == "error"
    assert "claude-nothing" in anthropic.json()["error"]["message"]


@pytest.mark.parametrize("system", [None, "Be brief.", [{"type": "text", "text": "Be brief."}]])
async def test_count_tokens_is_what_the_same_message_uses(loaded, system):
    request = {"model": "any", "messages": TURNS, **({"system": system} if system else {})}
    async with running_app(loaded) as (_, client):
        counted = await client.post("/v1/messages/count_tokens", json=request)
        used = await client.post("/v1/messages", json={**request, "max_tokens": 1})
    assert counted.status_code == 200
    assert counted.json() == {"input_tokens": used.json()["usage"]["input_tokens"]}


@pytest.mark.parametrize(
    "bad",
    [
        {"messages": []},
        {"messages": [{"role": "robot", "content": "hi"}]},
        {"messages": [{"role": "user", "content": [{"type": "image", "text": "x"}]}]},
        {"messages": TURNS, "system": 3},
        {"messages": TURNS, "tools_please": True},
        {"model": "", "messages": TURNS},
    ],
)
async def test_count_tokens_refuses_what_messages_refuses_with_the_same_error(loaded, bad):
    request = {"model": "m", **bad}
    async with running_app(loaded) as (_, client):
        counted = await client.post("/v1/messages/count_tokens", json=request)
        sent = await client.post("/v1/messages", json={**request, "max_tokens": 1})
    assert counted.status_code == sent.status_code == 400
    assert counted.json() == sent.json()


async def test_count_tokens_counts_a_prompt_too_long_to_run_and_refuses_an_oversized_body(loaded):
    long = {"model": "m", "messages": [{"role": "user", "content": "x" * 4000}]}
    async with running_app(loaded) as (_, client):
        counted = await client.post("/v1/messages/count_tokens", json=long)
        refused = await client.post("/v1/messages", json={**long, "max_tokens": 1})
        huge = await client.post("/v1/messages/count_tokens", content=b"x" * (MAX_BODY_BYTES + 1))
    assert refused.status_code == 400
    assert counted.json()["input_tokens"] > 4000
    assert huge.status_code == 413
    assert huge.json()["error"]["type"] == "request_too_large"


def body_request(headers: dict, pieces: int) -> tuple[Request, list]:
    """A request whose body arrives in `pieces` chunks of 256 KiB; the list records each one read."""
    read = []
    messages = [
        {"type": "http.request", "body": b"x" * (256 << 10), "more_body": i < pieces - 1}
        for i in range(pieces)
    ]

    async def receive() -> dict:
        read.append(1)
        return messages[len(read) - 1]

    raw_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "method": "POST", "path": "/v1/messages", "headers": raw_headers}
    return Request(scope, receive), read


@pytest.mark.parametrize("declared", [True, False])
async def test_an_oversized_body_is_read_to_its_end_before_the_413(declared):
    pieces = 16  # 4 MiB
    headers = {"content-length": str(pieces * (256 << 10))} if declared else {}
    request, read = body_request(headers, pieces)
    with pytest.raises(ApiError) as error:
        await read_json_object(request)
    assert error.value.status == 413
    assert len(read) == pieces  # all of it: the client was never left sending to a closed socket


async def test_a_client_waiting_for_100_continue_gets_the_413_before_sending():
    request, read = body_request({"content-length": str(4 << 20), "expect": "100-continue"}, 16)
    with pytest.raises(ApiError) as error:
        await read_json_object(request)
    assert error.value.status == 413
    assert read == []  # reading would have told the client to send its 4 MiB
