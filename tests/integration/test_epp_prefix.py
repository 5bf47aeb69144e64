"""The body scorers through a GIE data plane on the real Envoy 1.40 (tests/support/gie_data_plane.py;
issue 37, item 2). `prefix`, on by default: with no cohort header, each turn of a conversation (the whole
conversation so far, as chat clients send it) lands on the pod that served its earlier turns, while fresh
conversations spread over the pods; every body reaches its pod as it was sent, and one the picker cannot
read (not JSON, over its bound) is routed all the same and counted. `lora`: a vLLM pod's
`vllm:lora_requests_info`, read in the background, steers an adapter's requests to the pod running it,
and follows it when it moves."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.epp.picker import Picker
from gateway.epp.readings import Readings
from gateway.epp.wanted import Wanted
from gateway.spec.endpoint_picker import SCORERS
from graystack.local.processes import free_port, wait_until
from tests.support.gie_data_plane import DataPlane, PickerAddress
from tests.support.metered_picker import metered
from tests.support.named_upstreams import MODEL_HEADER, NAME_HEADER, serving
from tests.support.picker_thread import PickerThread

pytestmark = pytest.mark.integration

PORT = free_port()
HOSTS = {"pod-0": "127.0.11.2", "pod-1": "127.0.11.3", "pod-2": "127.0.11.4"}
ADDRESS = {name: f"{host}:{PORT}" for name, host in HOSTS.items()}
BOUND = 16 * 1024  # the picker's bound here, so that an over-bound body stays small
CONVERSATIONS = 6


@pytest.fixture
def pods():
    yield from serving(HOSTS, PORT)


def chat(who: int, turns: int) -> bytes:
    """Turn `turns` of conversation `who`: every message so far, as a chat client sends it."""
    messages = []
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"Conversation {who}, question {turn}: " + "why is it so? " * 12},
            {"role": "assistant", "content": f"Answer {turn}: " + "because it is. " * 12},
        ]
    return json.dumps({"model": "m", "messages": messages[:-1], "max_tokens": 8}).encode()


def in_chunks(content: bytes, size: int = 100) -> Iterator[bytes]:
    """The body sent chunked, in several pieces: the picker holds them all before it picks."""
    for start in range(0, len(content), size):
        yield content[start : start + size]


def test_conversations_stay_on_their_pod_without_a_cohort_header_and_new_ones_spread(
    pods, envoy_binary, tmp_path
):
    wanted = Wanted(pods={"v": tuple(ADDRESS.values())}, weights={"v": 100}, baseline="v")
    thread = PickerThread(Picker(lambda: wanted), bound=BOUND).start()
    plane = DataPlane(envoy_binary, tmp_path, "original_dst", PickerAddress(thread.port), [*ADDRESS.values()])
    try:
        plane.start()
        with httpx.Client(timeout=10) as client:

            def send(content: bytes | Iterator[bytes]) -> str:
                answer = client.post(f"{plane.url}/v1/chat/completions", content=content)
                assert answer.status_code == 200, answer.text
                return answer.headers[NAME_HEADER]

            first = {who: send(chat(who, 1)) for who in range(CONVERSATIONS)}
            assert set(first.values()) == set(HOSTS)  # fresh conversations spread over the pods
            for turns in (2, 3, 4):
                for who in range(CONVERSATIONS):
                    sent = chat(who, turns)
                    served = send(in_chunks(sent) if turns == 4 else sent)
                    assert served == first[who], (who, turns)
                    assert pods[served].last_body == sent  # held, then sent on as it came

            assert send(b"not json at all") in HOSTS  # routed, never refused
            too_long = json.dumps({"model": "m", "prompt": "x" * BOUND}).encode()
            assert send(too_long) in HOSTS
            assert pods["pod-0"].hits + pods["pod-1"].hits + pods["pod-2"].hits == 4 * CONVERSATIONS + 2
            assert thread.unread == {"not JSON": 1, "too large": 1}
    finally:
        plane.stop()
        thread.stop()


def lora_info(running: str, waiting: str = "", most: int = 2) -> str:
    return (
        "# TYPE vllm:lora_requests_info gauge\n"
        f'vllm:lora_requests_info{{max_lora="{most}",running_lora_adapters="{running}",'
        f'waiting_lora_adapters="{waiting}"}} {time.time()}\n'
    )


def running(readings: Readings, pod: str) -> frozenset[str]:
    adapters = readings.fresh(time.monotonic())[ADDRESS[pod]].adapters
    return adapters.running if adapters is not None else frozenset()


def test_a_lora_reading_steers_an_adapters_requests_to_the_pod_running_it(pods, envoy_binary, tmp_path):
    pods["pod-0"].metrics = lora_info("chat,sql-old")  # full: two running, two at most
    pods["pod-1"].metrics = lora_info("sql")
    pods["pod-2"].metrics = lora_info("chat,summary")  # full
    scorers = {**SCORERS, "lora": 4.0, "prefix": 0.0}
    wanted = Wanted(pods={"v": tuple(ADDRESS.values())}, weights={"v": 100}, baseline="v", scorers=scorers)
    with metered(envoy_binary, tmp_path, "override_host", wanted, list(ADDRESS.values())) as world:
        readings, plane = world.readings, world.plane
        wait_until(lambda: len(readings.fresh(time.monotonic())) == 3, 5, "the readings")
        with httpx.Client(timeout=10) as client:

            def served(model: str, n: int = 6) -> set[str]:
                names = set()
                for turn in range(n):
                    content = json.dumps({"model": model, "prompt": f"question {turn}"}).encode()
                    answer = client.post(f"{plane.url}/v1/completions", content=content)
                    assert answer.status_code == 200, answer.text
                    assert answer.headers[MODEL_HEADER] == model  # the body as it came
                    names.add(answer.headers[NAME_HEADER])
                return names

            assert served("sql") == {"pod-1"}
            assert served("chat") == {"pod-0", "pod-2"}  # both run it: taken in turn

            pods["pod-0"].metrics = lora_info("sql")  # the adapter moved
            pods["pod-1"].metrics = lora_info("chat,summary")
            wait_until(lambda: running(readings, "pod-0") == {"sql"}, 5, "the new readings")
            assert served("sql") == {"pod-0"}
