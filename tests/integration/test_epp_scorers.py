"""The picker's scorers through a GIE data plane on the real Envoy 1.40 (tests/support/gie_data_plane.py,
ORIGINAL_DST): three pods of one variant export vLLM's queue and KV-cache gauges, read in the background
by the picker's metrics reader as the gateway runs it; picks follow the readings, and a pod whose metrics
hang is picked by in-flight counts, listed as on fallback, without slowing any request."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.epp.wanted import Wanted
from graystack.local.processes import free_port, wait_until
from tests.support.metered_picker import metered, vllm
from tests.support.named_upstreams import NAME_HEADER, serving

pytestmark = pytest.mark.integration

PORT = free_port()
HOSTS = {"pod-0": "127.0.8.2", "pod-1": "127.0.8.3", "pod-2": "127.0.8.4"}
ADDRESS = {name: f"{host}:{PORT}" for name, host in HOSTS.items()}
BODY = b'{"model": "m", "prompt": "hello"}'


@pytest.fixture
def pods():
    yield from serving(HOSTS, PORT)


def test_picks_follow_the_queue_and_kv_readings_and_a_hanging_pod_falls_back(pods, envoy_binary, tmp_path):
    pods["pod-0"].metrics = vllm(waiting=12, kv=0.9)
    pods["pod-1"].metrics = vllm(waiting=0, kv=0.1)
    pods["pod-2"].metrics_delay = 5.0  # its metrics hang
    wanted = Wanted(pods={"v": tuple(ADDRESS.values())}, weights={"v": 100}, baseline="v")
    with metered(envoy_binary, tmp_path, "original_dst", wanted, list(ADDRESS.values())) as world:
        picker, readings, plane = world.picker, world.readings, world.plane
        wait_until(
            lambda: set(readings.fresh(time.monotonic())) == {ADDRESS["pod-0"], ADDRESS["pod-1"]},
            5,
            "the readings",
        )

        def served(n: int) -> list[str]:
            names = []
            for _ in range(n):
                started = time.monotonic()
                answer = client.post(f"{plane.url}/v1/completions", content=BODY)
                assert answer.status_code == 200, (answer.text, plane.stats())
                assert time.monotonic() - started < 0.5  # a pick never waits on the hanging metrics
                names.append(answer.headers[NAME_HEADER])
            return names

        with httpx.Client(timeout=10) as client:
            first = served(12)
            assert "pod-0" not in first  # its queue and KV cache are full
            assert "pod-2" in first  # its metrics hang: picked by its in-flight count (none)
            assert picker.fallbacks()[ADDRESS["pod-2"]] == "metrics unreadable: TimeoutError"
            assert set(picker.fallbacks()) == {ADDRESS["pod-2"]}

            pods["pod-0"].metrics = vllm(waiting=0, kv=0.0)
            pods["pod-1"].metrics = vllm(waiting=30, kv=0.95)
            # both pods' new readings (CI once picked before pod-0's came in: every pick went to pod-2)
            wait_until(
                lambda: (
                    {
                        name: readings.fresh(time.monotonic())[ADDRESS[name]].queue
                        for name in ("pod-0", "pod-1")
                    }
                    == {"pod-0": 0, "pod-1": 30}
                ),
                5,
                "the new readings",
            )
            second = served(12)
            assert "pod-1" not in second
            assert "pod-0" in second
