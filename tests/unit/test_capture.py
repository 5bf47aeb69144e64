"""Answer capture (issue 28), pure parts: the spec's `analysis.quality`, the builders' capture config (none
without the section), the captured content as text, and shadow copies paired with their originals."""

from __future__ import annotations

import dataclasses
import json

import pytest
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf import json_format

from gateway import names
from gateway.answers.answer import Answer
from gateway.answers.capture import captured, unescape
from gateway.answers.pairs import PairStore
from gateway.envoy.answer_filter import FILTER_NAME
from gateway.envoy.capture import REQUEST_FILTER
from gateway.errors import SpecError
from gateway.spec.model import RolloutSpec, validate_spec
from gateway.spec.yaml12 import load_yaml
from tests.unit.test_envoy_routes import build
from tests.unit.test_spec import DESIGN_EXAMPLE

QUALITY = {
    "capture_percent": 10,
    "max_greedy_disagreement": 0.02,
    "structure": True,
    "judge": {"url": "http://judge:8000/v1", "model": "judge", "max_loss": 0.55, "budget_per_hour": 200},
}


def spec_changes(quality: dict | None, mirror: int | None = None) -> dict:
    routing = {"weights": {"baseline": 100, "zero-layer": 0}}
    if mirror is not None:
        routing["mirror"] = {"variant": "zero-layer", "percent": mirror}
    return {"routing": routing, "analysis": {} if quality is None else {"quality": quality}}


def spec_of(changes: dict) -> RolloutSpec:
    return validate_spec({**load_yaml(DESIGN_EXAMPLE), **changes})


def capture_rules(resources) -> list[dict | None]:
    """Each route's capture metadata, across the route configs and the shadow hop's inline routes."""
    configs = list(resources.routes)
    for listener in resources.listeners:
        manager = hcm_pb2.HttpConnectionManager()
        listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
        if manager.HasField("route_config"):
            configs.append(manager.route_config)
    rules = []
    for config in configs:
        for host in config.virtual_hosts:
            for route in host.routes:
                meta = route.metadata.filter_metadata.get(FILTER_NAME)
                rules.append(json_format.MessageToDict(meta)[names.CAPTURE_KEY] if meta is not None else None)
    return rules


def filters(resources) -> list[str]:
    names_ = []
    for listener in resources.listeners:
        manager = hcm_pb2.HttpConnectionManager()
        listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
        names_ += [f.name for f in manager.http_filters]
    return names_


def test_the_issues_example_validates_and_the_defaults_keep_nothing_live():
    quality = spec_of(spec_changes(QUALITY)).analysis.quality
    assert quality is not None
    assert quality.judge is not None
    assert quality.capture_percent == 10
    assert quality.live_per_million == 100_000
    assert quality.judge.max_loss == 0.55
    assert quality.shadow is True
    default = spec_of(spec_changes({})).analysis.quality
    assert default is not None
    assert (default.capture_percent, default.max_answer_bytes, default.shadow) == (0, 16_384, True)


@pytest.mark.parametrize(
    "bad",
    [
        {"capture_percent": 101},
        {"max_answer_bytes": 0},
        {"judge": {"url": "u"}},
        {"max_greedy_disagreement": 1},
    ],
)
def test_a_bad_quality_section_is_refused(bad):
    with pytest.raises(SpecError):
        spec_of(spec_changes(bad))


def test_no_quality_section_builds_no_capture_anywhere():
    resources = build(**spec_changes(None, mirror=100))
    assert set(capture_rules(resources)) == {None}
    assert REQUEST_FILTER not in filters(resources)
    for listener in resources.listeners:
        assert "envoy_on_request" not in str(listener)  # the capture Lua is not in the script


def test_the_routes_sample_live_traffic_and_keep_every_shadow_original_and_copy():
    live = [r for r in capture_rules(build(**spec_changes(QUALITY))) if r is not None]
    assert live
    assert all(r == {"ppm": 100_000, "mirror": False, "bytes": 16_384} for r in live)
    shadow = [r for r in capture_rules(build(**spec_changes(QUALITY, mirror=50))) if r is not None]
    assert {"ppm": 100_000, "mirror": True, "bytes": 16_384} in shadow  # the mirroring routes' originals
    assert {"ppm": 1_000_000, "mirror": False, "bytes": 16_384} in shadow  # the shadow hop: every copy
    off = [r for r in capture_rules(build(**spec_changes({**QUALITY, "shadow": False}, mirror=50))) if r]
    assert all(r["mirror"] is False and r["ppm"] == 100_000 for r in off)
    assert filters(build(**spec_changes(QUALITY, mirror=50))).count(REQUEST_FILTER) == 2


def test_stream_fragments_are_unescaped_and_a_cut_escape_is_dropped():
    assert captured({"text": 'h\\u00e9 \\"x\\"\\n', "calls": '{\\"a\\": 1}'}).text == 'h\u00e9 "x"\n'
    assert unescape("ab\\u00", truncated=True) == "ab"
    assert unescape("ab\\", truncated=True) == "ab"
    assert unescape("ab\\\\", truncated=True) == "ab\\"
    assert unescape('a"b') is None


@pytest.mark.parametrize(
    ("body", "text", "calls"),
    [
        (
            {"choices": [{"message": {"content": "hi", "tool_calls": [{"function": {"arguments": "{}"}}]}}]},
            "hi",
            "{}",
        ),
        ({"choices": [{"text": "done"}]}, "done", ""),
        (
            {
                "type": "message",
                "content": [{"type": "text", "text": "a"}, {"type": "tool_use", "input": {"x": 1}}],
            },
            "a",
            '{"x": 1}',
        ),
        ({"output": [{"type": "message", "content": [{"type": "output_text", "text": "r"}]}]}, "r", ""),
    ],
)
def test_a_whole_bodys_text_is_taken_as_its_api_puts_it(body, text, calls):
    got = captured({"text": json.dumps(body), "raw": True})
    assert (got.text, got.calls, got.unreadable) == (text, calls, False)


def test_a_body_cut_at_the_cap_is_read_to_the_cut_and_bad_input_is_unreadable():
    cut = captured({"text": '{"choices": [{"message": {"content": "yyyy', "raw": True, "truncated": True})
    assert (cut.text, cut.truncated) == ("yyyy", True)
    assert captured({"text": "not json", "raw": True}).unreadable
    assert captured({"unreadable": True}).text is None
    assert captured({"text": 3}).unreadable


ANSWER = Answer(
    variant="baseline", answered_by=None, segment="default", api="chat", streamed=True, status=200,
    prompt_bytes=10, prompt_bucket="0-512", started_at=0.0, ttft=None, itl=None, duration=None,
    input_tokens=None, output_tokens=None, tokens_counted=False, finish=None, ending="complete",
    request_id="r1", captured=True, text="abc",
)  # fmt: skip


def half(request_id: str, shadow: bool, text: str = "abc") -> Answer:
    return dataclasses.replace(ANSWER, request_id=request_id, shadow=shadow, text=text)


def test_pairs_complete_by_request_id_and_are_handed_out_by_cursor():
    pairs = PairStore()
    assert pairs.add(half("a", shadow=True), now=0) is None
    assert pairs.add(dataclasses.replace(ANSWER, captured=False), now=0) is None  # not captured: not taken
    pair = pairs.add(half("a", shadow=False), now=1)
    assert pair is not None
    assert pair.original.shadow is False
    assert pair.shadow.shadow is True
    pairs.add(half("b", shadow=False), now=1)
    pairs.add(half("b", shadow=True), now=1)
    first = pairs.since(0)
    assert [p.original.request_id for p in first.pairs] == ["a", "b"]
    assert pairs.waiting == 0
    assert pairs.since(first.cursor).pairs == ()


def test_halves_expire_after_the_ttl_and_the_byte_budget_and_capacity_bound_them():
    pairs = PairStore(ttl=10, budget=1_000, capacity=1)
    pairs.add(half("old", shadow=False), now=0)
    pairs.add(half("new", shadow=True), now=11)
    assert pairs.counts.expired == 1
    assert pairs.waiting == 1
    pairs.add(half("big", shadow=False, text="x" * 600), now=11)
    assert pairs.counts.evicted == 1
    assert pairs.waiting == 1
    assert pairs.waiting_bytes <= 1_000
    for rid in ("p", "q"):
        pairs.add(half(rid, shadow=False), now=12)
        pairs.add(half(rid, shadow=True), now=12)
    batch = pairs.since(0)
    assert [p.original.request_id for p in batch.pairs] == ["q"]
    assert batch.missed == 1
