"""The Responses API (a conversation kept by id, read, deleted; streamed as typed events) and embeddings
on graystack's own server, in process (through the gateway and the official SDK:
tests/integration/test_apis.py)."""

from __future__ import annotations

import base64
import json
import math
import struct

import pytest

from inference.server.responses import ResponseStore, Stored
from tests.support.inference import running_app, tiny_model


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("weights"), "baseline")


def create(**fields) -> dict:
    return {"model": "graystack-tiny", "input": "Hi", "max_output_tokens": 4, "temperature": 0, **fields}


def text_of(response: dict) -> str:
    return "".join(part["text"] for item in response["output"] for part in item["content"])


async def test_a_follow_up_continues_the_stored_conversation_and_the_response_can_be_read_and_deleted(loaded):
    async with running_app(loaded) as (_, client):
        first = (await client.post("/v1/responses", json=create())).json()
        follow = (await client.post("/v1/responses", json=create(previous_response_id=first["id"]))).json()
        fresh = (await client.post("/v1/responses", json=create())).json()
        read = await client.get(f"/v1/responses/{follow['id']}")
        deleted = await client.delete(f"/v1/responses/{first['id']}")
        gone = await client.get(f"/v1/responses/{first['id']}")
        orphan = await client.post("/v1/responses", json=create(previous_response_id=first["id"]))
    assert (first["object"], first["status"], first["previous_response_id"]) == (
        "response",
        "incomplete",
        None,
    )
    assert first["incomplete_details"] == {"reason": "max_output_tokens"}
    assert first["usage"]["output_tokens"] == 4
    assert follow["previous_response_id"] == first["id"]
    # the follow-up's prompt holds the first turn and its answer: longer than a fresh one's
    assert follow["usage"]["input_tokens"] > fresh["usage"]["input_tokens"]
    assert read.json() == follow
    assert deleted.json() == {"id": first["id"], "object": "response", "deleted": True}
    assert gone.status_code == 404
    assert gone.json()["error"]["message"].startswith("Response with id")
    assert orphan.status_code == 404


async def test_a_response_not_stored_is_not_kept_and_a_bad_field_is_named(loaded):
    async with running_app(loaded) as (_, client):
        unstored = (await client.post("/v1/responses", json=create(store=False))).json()
        read = await client.get(f"/v1/responses/{unstored['id']}")
        bad = await client.post("/v1/responses", json=create(tools=[]))
        wrong_method = await client.put("/v1/responses/x")
    assert read.status_code == 404
    assert bad.status_code == 400
    assert "tools" in bad.json()["error"]["message"]
    assert "error" in wrong_method.json()  # OpenAI's shape, not the Messages API's


def events(body: str) -> list[tuple[str, dict]]:
    found = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


async def test_a_stream_is_typed_events_ending_in_the_stored_response(loaded):
    async with running_app(loaded) as (_, client):
        streamed = await client.post("/v1/responses", json=create(stream=True, max_output_tokens=64))
        seen = events(streamed.text)
        final = seen[-1][1]["response"]
        read = (await client.get(f"/v1/responses/{final['id']}")).json()
    kinds = [kind for kind, _ in seen]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    deltas = [data["delta"] for kind, data in seen if kind == "response.output_text.delta"]
    assert "".join(deltas) == text_of(final) == text_of(read)
    assert [data["sequence_number"] for _, data in seen] == list(range(1, len(seen) + 1))


def test_the_store_is_bounded_least_recently_used_first():
    store = ResponseStore(capacity=2)
    for name in ("a", "b"):
        store.put(name, Stored({}, ()))
    assert store.get("a") is not None  # a is now the most recently used
    store.put("c", Stored({}, ()))
    assert (store.get("a"), store.get("b"), store.get("c")) == (Stored({}, ()), None, Stored({}, ()))


async def test_embeddings_are_unit_vectors_alike_in_float_and_base64(loaded):
    async with running_app(loaded) as (_, client):
        floats = (
            await client.post("/v1/embeddings", json={"model": "m", "input": ["a cat", "a dog"]})
        ).json()
        encoded = (
            await client.post(
                "/v1/embeddings", json={"model": "m", "input": "a cat", "encoding_format": "base64"}
            )
        ).json()
        empty = await client.post("/v1/embeddings", json={"model": "m", "input": ""})
        metrics = (await client.get("/metrics")).text
    cat, dog = (item["embedding"] for item in floats["data"])
    assert [item["index"] for item in floats["data"]] == [0, 1]
    assert math.isclose(sum(x * x for x in cat), 1.0, rel_tol=1e-4)
    assert cat != dog
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    assert struct.unpack(f"<{len(raw) // 4}f", raw) == pytest.approx(cat, abs=1e-5)
    assert floats["usage"] == {"prompt_tokens": 2 * 6, "total_tokens": 2 * 6}  # BOS and 5 bytes each
    assert empty.status_code == 400
    assert 'graystack_requests_total{code="200",variant="baseline"}' in metrics
