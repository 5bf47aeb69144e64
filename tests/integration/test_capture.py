"""Answer capture (issue 28) on the real Envoy: the answer filter keeps sampled answers' text, the gateway
reads it, a shadow stage keeps each mirrored copy and its original under one request id, and without
`analysis.quality` (or at `capture_percent: 0` outside a shadow stage) no answer content reaches the gateway.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.answers.answer import Answer
from gateway.answers.pairs import PairStore
from gateway.names import MIRROR_HEADER, shadow_hop_cluster
from tests.support.measured import ROUTED_HEADER, Measured, measured_gateway
from tests.support.scripted_upstream import served_scripted_upstream

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
CAP = 400  # bytes: over json-chat's whole body (the cap counts a body's JSON too), under json-long's


def routing(mirror_percent: int | None = None) -> dict:
    mirror = {"variant": "candidate", "percent": mirror_percent} if mirror_percent is not None else None
    return {"header": ROUTED_HEADER, "weights": {"baseline": 100, "candidate": 0}, "mirror": mirror}


def gateway(tmp_path, envoy_binary, port: int, quality: dict | None, mirror_percent: int | None = None):
    analysis = {} if quality is None else {"quality": quality}
    changes = {"routing": routing(mirror_percent), "analysis": analysis}
    return measured_gateway(tmp_path, envoy_binary, {"baseline": port, "candidate": port}, {}, changes)


async def send(
    measured: Measured, scripts: list[str], body: dict | None = None, headers: dict | None = None
) -> list[Answer]:
    """Each script once, all at once; the answers (the shadow copies' too) once Envoy has logged them."""
    cursor = measured.gateway.answers.cursor
    sent = body or {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=measured.url, timeout=10) as client:
        replies = await asyncio.gather(
            *(client.post(CHAT, json=sent, headers={"x-script": s, **(headers or {})}) for s in scripts)
        )
    assert all(r.status_code == 200 for r in replies), [r.status_code for r in replies]
    await asyncio.sleep(1.5)  # Envoy's access log flushes every second
    originals = [a for a in await measured.answers(cursor, len(scripts)) if not a.shadow]
    assert len(originals) == len(scripts)
    return list(measured.gateway.answers.since(cursor).answers)


async def test_no_quality_section_sends_no_answer_content(tmp_path, envoy_binary):
    with served_scripted_upstream() as port:
        async with gateway(tmp_path, envoy_binary, port, None, mirror_percent=100) as measured:
            answers = await send(measured, ["chat", "json-chat", "chat-unicode"] * 3)
    assert any(a.shadow for a in answers)
    assert all(not a.captured and a.text is None and a.calls is None for a in answers), answers
    assert all(a.temperature is None and not a.tools for a in answers)


async def test_capture_percent_zero_outside_shadow_sends_no_answer_content(tmp_path, envoy_binary):
    with served_scripted_upstream() as port:
        async with gateway(tmp_path, envoy_binary, port, {"max_greedy_disagreement": 0.02}) as measured:
            answers = await send(measured, ["chat", "json-chat", "chat-unicode"] * 3)
    assert all(not a.captured and a.text is None for a in answers), answers
    assert all(a.request_id for a in answers)


async def test_shadow_stage_keeps_each_mirrored_copy_and_its_original(tmp_path, envoy_binary):
    """A 50 % mirror: every original on the mirroring route is kept (Envoy 1.40 picks the mirrored requests
    at random, not by the request id), and each copy carries its original's x-request-id, so each pairs."""
    with served_scripted_upstream() as port:
        async with gateway(tmp_path, envoy_binary, port, {}, mirror_percent=50) as measured:
            answers = await send(measured, ["chat"] * 40)
    shadows = [a for a in answers if a.shadow]
    kept = [a for a in answers if not a.shadow and a.captured]
    assert 5 <= len(shadows) <= 35, len(shadows)
    assert all(a.captured and a.text == "abc" for a in shadows), shadows
    assert len(kept) == 40
    assert {a.request_id for a in shadows} <= {a.request_id for a in kept}
    assert all(a.text == "abc" for a in kept)
    pairs = PairStore()
    for answer in answers:
        pairs.add(answer, now=0.0)
    assert len(pairs.since(0).pairs) == len(shadows)


async def test_a_split_that_gives_the_mirrors_variant_a_share_copies_only_the_others_requests(
    tmp_path, envoy_binary
):
    """An experiment's pairs (`strategy.experiment.mirror_percent`) on a 50/50 split: the real Envoy copies
    each request the split sends to the baseline, by the header its weighted cluster sets, and none of
    the candidate's own, even when the client sends that header itself."""
    mirror = {"variant": "candidate", "percent": 100}
    changes = {
        "routing": {"header": ROUTED_HEADER, "weights": {"baseline": 50, "candidate": 50}, "mirror": mirror},
        "analysis": {"quality": {}},
    }
    forged = {MIRROR_HEADER: shadow_hop_cluster("candidate")}
    with served_scripted_upstream() as port:
        variants = {"baseline": port, "candidate": port}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, changes) as measured:
            answers = await send(measured, ["chat"] * 60, headers=forged)
    originals = {a.request_id: a.variant for a in answers if not a.shadow}
    copies = [a for a in answers if a.shadow]
    assert 10 <= list(originals.values()).count("baseline") <= 50, originals
    assert sorted(a.request_id for a in copies) == sorted(r for r, v in originals.items() if v == "baseline")
    assert {a.variant for a in copies} == {"candidate"}


async def test_live_capture_reads_text_calls_request_fields_and_honours_the_cap(tmp_path, envoy_binary):
    body = {
        "model": "m",
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    with served_scripted_upstream() as port:
        quality = {"capture_percent": 100, "max_answer_bytes": CAP}
        async with gateway(tmp_path, envoy_binary, port, quality) as measured:
            answers = await send(measured, ["chat-unicode", "json-long", "chat-not-utf8", "json-chat"], body)
    by_text = {a.text: a for a in answers}
    unicode = by_text['h\u00e9llo "\u2713\n']
    assert (unicode.calls, unicode.truncated) == ('{"a": 1}', False)
    assert (unicode.temperature, unicode.response_format, unicode.tools) == (0.0, "json_schema", True)
    assert unicode.schema_given
    assert by_text["hi"].truncated is False
    long = next(a for a in answers if a.truncated)
    assert long.text is not None, long
    assert set(long.text) == {"y"}
    assert len(long.text) < CAP
    broken = next(a for a in answers if a.text_unreadable)
    assert broken.captured
    assert broken.text is None
