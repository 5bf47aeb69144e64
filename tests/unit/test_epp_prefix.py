"""The picker's body scorers (issue 37, item 2): `prefix` (the prompt cut into chained block hashes, a
bounded index of the pods they were sent to, a pod's share of the leading blocks found on it contiguously)
and `lora` (vLLM's `vllm:lora_requests_info` read, and scored as llm-d does); both through the Picker, and
the spec's bound for the index. Through the real Envoy: tests/integration/test_epp_prefix.py."""

from __future__ import annotations

import json

import pytest

from gateway.epp.picker import Picker
from gateway.epp.prefix import PrefixIndex, block_hashes, prompt_of, shares_of
from gateway.epp.readings import Adapters, Reading, Readings, parse
from gateway.epp.scorers import Signals, lora
from gateway.epp.wanted import Wanted
from gateway.errors import SpecError
from gateway.spec.endpoint_picker import SCORERS, Prefix
from gateway.spec.model import validate_spec

PODS = ("a", "b", "c")


def test_the_prompt_is_the_system_text_then_the_messages_then_the_prompt_in_one_json_form():
    turn = {"model": "m", "system": "be brief", "messages": [{"role": "user", "content": "héllo"}]}
    whole = 'be brief[{"role":"user","content":"héllo"}]'.encode()
    assert prompt_of(turn, 1000) == whole
    spaced = json.loads(json.dumps(turn, indent=4))
    assert prompt_of(spaced, 1000) == whole  # the client's spacing changes nothing
    assert prompt_of(turn, 12) == whole[:12]  # no further than asked
    assert prompt_of({"prompt": "once upon"}, 1000) == b"once upon"
    assert prompt_of({"prompt": [1, 2, 3]}, 1000) == b"[1,2,3]"  # token ids
    assert prompt_of({"model": "m"}, 1000) == b""


def test_blocks_are_whole_chained_from_the_model_and_at_most_the_leading_ones():
    text = b"abcd" * 5 + b"xy"  # five whole blocks of 4 bytes and a part block
    hashes = block_hashes(text, "m", 4, 100)
    assert len(hashes) == 5  # the part block at the end is left out
    assert len(set(hashes)) == 5  # the same bytes in another place: another hash (the chain)
    assert block_hashes(text + b"zw" * 10, "m", 4, 100)[:5] == hashes  # a longer prompt starts the same
    assert block_hashes(b"Xbcd" + text[4:], "m", 4, 100)[1:] != hashes[1:]  # a change moves all after it
    assert block_hashes(text, "other-model", 4, 100) != hashes  # each model's cache is its own
    assert block_hashes(text, "m", 4, 2) == hashes[:2]
    assert block_hashes(b"abc", "m", 4, 100) == ()


def test_a_pods_share_is_its_leading_blocks_found_contiguously_from_the_first():
    index = PrefixIndex(100)
    blocks = block_hashes(b"0123456789abcdef", "m", 4, 100)  # four blocks
    index.record(blocks[:2], "a")
    index.record(blocks[:1] + blocks[2:], "b")  # blocks 0, 2 and 3, not 1
    index.record(blocks[1:], "c")  # all but the first
    assert index.found(blocks, PODS) == {"a": 2, "b": 1, "c": 0}
    assert shares_of(index.found(blocks, PODS), len(blocks)) == {"a": 0.5, "b": 0.25, "c": 0.0}
    assert shares_of(index.found((), PODS), 0) == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_the_index_is_bounded_and_forgets_the_least_recently_sent_block_first():
    index = PrefixIndex(4)
    old = block_hashes(b"old-old-", "m", 4, 100)
    index.record(old, "a")
    index.record(block_hashes(b"new-new-", "m", 4, 100), "b")
    assert len(index) == 4
    index.record(old, "c")  # sent again: now the most recent
    index.record(block_hashes(b"more", "m", 4, 100), "c")
    assert len(index) == 4
    assert index.found(old, PODS) == {"a": len(old), "b": 0, "c": len(old)}
    index.size = 2  # the spec's bound lowered: the next record trims
    index.record(old, "a")
    assert len(index) == 2


def test_what_a_request_recorded_is_taken_back_alone():
    index = PrefixIndex(100)
    shared, own = block_hashes(b"sys-sys-", "m", 4, 100), block_hashes(b"sys-sys-mine", "m", 4, 100)
    index.record(shared, "a")
    fresh = index.record(own, "a")
    assert fresh == own[2:]  # a held the first two already
    index.forget(fresh, "a")
    assert index.found(own, ["a"]) == {"a": 2}  # of three


def conversation(who: int, turns: int, system: str | None = None) -> dict[str, object]:
    """A chat body: the whole conversation so far, as a client sends each turn."""
    messages = [{"role": "system", "content": system}] if system else []
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"conversation {who}, question {turn}: " + "why? " * 20},
            {"role": "assistant", "content": f"answer {turn} " + "because. " * 20},
        ]
    return {"model": "m", "messages": messages}


def test_the_turns_of_a_conversation_follow_its_first_pod_and_new_ones_spread():
    wanted = Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v")
    picker = Picker(lambda: wanted)
    first = {}
    for who in range(6):
        ticket = picker.pick({}, None, conversation(who, 1))
        assert ticket is not None
        first[who] = ticket.endpoints[0]
        picker.release(ticket)
    assert set(first.values()) == set(PODS)  # nothing in common: spread, in turn
    for turns in (2, 3):
        for who in range(6):
            ticket = picker.pick({}, None, conversation(who, turns))
            assert ticket is not None
            assert ticket.endpoints[0] == first[who]
            picker.release(ticket)


def test_a_shared_system_text_draws_new_conversations_only_while_its_pod_is_no_busier():
    picker = Picker(lambda: Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v"))
    system = "You are a helpful assistant. " * 8
    held = picker.pick({}, None, conversation(0, 1, system))
    assert held is not None
    second = picker.pick({}, None, conversation(1, 1, system))  # the first is still in flight
    assert second is not None
    assert second.endpoints[0] != held.endpoints[0]  # its pod is busier: not drawn there
    picker.release(held)
    picker.release(second)
    third = picker.pick({}, None, conversation(2, 1, system))  # all idle: the system text's blocks win
    assert third is not None
    assert third.endpoints[0] in (held.endpoints[0], second.endpoints[0])


def test_a_conversation_moves_with_the_pod_the_gateway_says_served_it():
    picker = Picker(lambda: Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v"))
    ticket = picker.pick({}, None, conversation(0, 1))
    assert ticket is not None
    elsewhere = next(pod for pod in PODS if pod != ticket.endpoints[0])
    picker.served(ticket, elsewhere)  # a retry onto another pod
    picker.release(ticket)
    again = picker.pick({}, None, conversation(0, 2))
    assert again is not None
    assert again.endpoints[0] == elsewhere


def test_prefix_weighted_zero_reads_no_body_and_keeps_no_index():
    wanted = Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v", scorers={**SCORERS, "prefix": 0})
    picker = Picker(lambda: wanted)
    draft = picker.draw({}, None)
    assert draft is not None
    assert not draft.wants_body
    ticket = picker.place(draft, conversation(0, 1))
    assert ticket.blocks == ()
    assert ticket.indexed is None


LORA = """# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql, chat",waiting_lora_adapters="x"} 1.8e9
"""


def test_vllms_lora_gauge_is_read_the_newest_sample_winning():
    assert parse(LORA).adapters == Adapters(frozenset({"sql", "chat"}), frozenset({"x"}), 2)
    bad = 'vllm:lora_requests_info{max_lora="many",running_lora_adapters="",waiting_lora_adapters=""} 1\n'
    assert parse(bad).adapters == Adapters(most=0)  # room unknown: none
    assert parse("vllm:num_requests_waiting 1\n").adapters is None  # a server without LoRA


def test_lora_scores_running_then_room_then_waiting_then_full_and_falls_back_without_a_reading():
    readings = {
        "a": Reading(adapters=Adapters(frozenset({"sql"}), frozenset(), 2)),
        "b": Reading(adapters=Adapters(frozenset({"chat"}), frozenset(), 2)),
        "c": Reading(adapters=Adapters(frozenset({"chat"}), frozenset({"sql"}), 2)),
        "d": Reading(adapters=Adapters(frozenset({"chat", "x"}), frozenset(), 2)),
        "e": Reading(queue=0),  # no LoRA gauge: scored by its in-flight count
    }
    pods = [*readings, "f"]  # f: no reading at all
    signals = Signals({"e": 1, "f": 3}, readings, adapter="sql")
    assert lora(pods, signals) == {"a": 1.0, "b": 0.8, "c": 0.6, "d": 0.0, "e": 2 / 3, "f": 0.0}
    assert set(lora(pods, Signals({}, readings)).values()) == {1.0}  # no model asked: no preference


def test_an_adapters_requests_go_to_the_pod_running_it():
    readings = Readings()
    readings.record("a", Reading(adapters=Adapters(frozenset({"chat"}), frozenset(), 1)), 0.0)
    readings.record("b", Reading(adapters=Adapters(frozenset({"sql"}), frozenset(), 1)), 0.0)
    readings.record("c", Reading(adapters=Adapters(frozenset(), frozenset(), 1)), 0.0)
    wanted = Wanted(
        pods={"v": PODS}, weights={"v": 100}, baseline="v", scorers={**SCORERS, "prefix": 0, "lora": 4}
    )
    picker = Picker(lambda: wanted, readings=readings, clock=lambda: 0.0)
    for _ in range(3):
        ticket = picker.pick({}, None, {"model": "sql", "prompt": "select"})
        assert ticket is not None
        assert ticket.endpoints[0] == "b"
        picker.release(ticket)
    ticket = picker.pick({}, None, {"model": "new-adapter", "prompt": "x"})
    assert ticket is not None
    assert ticket.endpoints[0] == "c"  # the only pod with room to load it


def test_the_prefix_bound_is_refused_naming_the_field():
    data = {
        "name": "llm",
        "variants": {"stable": {"service": "a", "port": 1}, "canary": {"service": "b", "port": 1}},
        "routing": {"weights": {"stable": 100, "canary": 0}},
        "endpoint_picker": {"pool": "llm", "prefix": {"block_bytes": 128, "blocks": 1000}},
    }
    live = validate_spec(data)
    assert live.endpoint_picker is not None
    assert live.endpoint_picker.prefix == Prefix(block_bytes=128, blocks=1000, max_blocks=256)
    for field, value in (("block_bytes", 0), ("blocks", -1), ("max_blocks", "many"), ("hashes", 3)):
        with pytest.raises(SpecError, match=rf"endpoint_picker\.prefix\.{field}"):
            validate_spec({**data, "endpoint_picker": {"pool": "llm", "prefix": {field: value}}})
