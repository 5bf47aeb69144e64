"""The picker's scorers within a variant: each scorer alone, the weighted ranking, the fallback to in-flight
counts when a pod's metrics are missing or stale, the bounded cohort map, the metrics parsed, the spec's
weights, and the reader's edge (a hanging pod costs a round its timeout, never a pick)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gateway.epp.metrics_reader import MetricsReader, Scrape
from gateway.epp.picker import Picker
from gateway.epp.readings import Adapters, Reading, Readings, parse
from gateway.epp.scorers import Recent, Signals, kv_cache, queue, rank, session
from gateway.epp.wanted import Wanted, parse_scorers
from gateway.spec.endpoint_picker import SCORERS, EndpointPicker, check_endpoint_picker
from tests.support.clock import FakeClock

PODS = ("a", "b", "c")
VLLM = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters=""} 1.0
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="x"} 2.0
"""
LLAMA_CPP = """# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 4
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.5
"""


def test_vllm_and_llama_cpp_metrics_are_read():
    assert parse(VLLM) == Reading(5.0, 0.25, Adapters(frozenset({"sql", "chat"}), frozenset({"x"}), 4))
    assert parse(LLAMA_CPP) == Reading(queue=4.0, kv_cache=0.5)
    assert parse("other_metric 1\n") == Reading()  # a server without these series: nothing known


def test_each_scorer_alone():
    signals = Signals({"c": 2}, {"a": Reading(queue=0, kv_cache=0.9), "b": Reading(queue=10, kv_cache=0.1)})
    assert queue(PODS, signals) == {"a": 1.0, "b": 0.0, "c": 0.0}  # c: no reading, its in-flight score
    assert kv_cache(PODS, signals) == pytest.approx({"a": 0.1, "b": 0.9, "c": 0.0})
    assert session(PODS, Signals({}, {}, last_served="b")) == {"a": 0.0, "b": 1.0, "c": 0.0}


def test_a_queue_heavy_pod_loses_to_an_idle_one():
    signals = Signals({}, {"a": Reading(queue=12, kv_cache=0.8), "b": Reading(queue=0, kv_cache=0.1)})
    assert [rank(["a", "b"], signals, SCORERS, turn)[0] for turn in range(4)] == ["b"] * 4


def test_the_weights_decide_between_signals_and_zero_turns_one_off():
    signals = Signals({}, {"a": Reading(queue=0, kv_cache=0.9), "b": Reading(queue=5, kv_cache=0.0)})
    assert rank(["a", "b"], signals, {"queue": 2.0, "kv_cache": 1.0}, 0)[0] == "a"
    assert rank(["a", "b"], signals, {"queue": 1.0, "kv_cache": 2.0}, 0)[0] == "b"
    off = {name: 0.0 for name in SCORERS}
    assert [rank(["a", "b"], signals, off, turn)[0] for turn in range(2)] == ["a", "b"]  # all off: in turn


def test_a_cohort_returns_to_its_pod_unless_it_is_clearly_busier():
    idle = Signals({}, {}, last_served="c")
    assert rank(PODS, idle, SCORERS, 0)[0] == "c"
    busy = Signals({"c": 3}, {"c": Reading(queue=9, kv_cache=0.9)}, last_served="c")
    assert rank(PODS, busy, SCORERS, 0)[-1] == "c"


def test_stale_or_unreadable_metrics_fall_back_to_in_flight_counts_and_say_why():
    clock = FakeClock(100.0)
    readings = Readings(interval=1.0)
    readings.record("a", Reading(queue=50), clock.now)
    readings.record("b", Reading(queue=0), clock.now)
    assert readings.failed("c", "ConnectError", clock.now)
    wanted = Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v", scorers={"queue": 1.0})
    picker = Picker(lambda: wanted, readings=readings, clock=clock)
    assert picker.fallbacks() == {"c": "metrics unreadable: ConnectError"}
    tickets = [picker.pick({}, None) for _ in range(4)]
    assert {ticket.endpoints[0] for ticket in tickets} == {"b", "c"}  # not a
    assert {ticket.unmetered for ticket in tickets} == {1}  # c, ranked without metrics at each pick
    clock.now += 3.5  # a's and b's readings are now stale: every pod by its in-flight count
    readings.failed("a", "ReadTimeout", clock.now)
    assert picker.fallbacks() == {
        "a": "metrics 3.5s old: ReadTimeout",
        "b": "metrics 3.5s old",
        "c": "metrics unreadable: ConnectError",
    }
    ticket = picker.pick({}, None)
    assert (ticket.endpoints[0], ticket.unmetered) == ("a", 3)  # the only pod with nothing in flight


def test_the_cohort_map_is_bounded_and_forgets_the_least_recent():
    recent = Recent(2)
    for key, pod in (("u1", "a"), ("u2", "b"), ("u1", "c"), ("u3", "a")):
        recent.set(key, pod)
    assert len(recent) == 2
    assert (recent.get("u1"), recent.get("u2"), recent.get("u3")) == ("c", None, "a")


def test_a_cohort_stays_on_the_pod_that_served_it():
    wanted = Wanted(pods={"v": PODS}, weights={"v": 100}, baseline="v", cohort_header="x-user")
    picker = Picker(lambda: wanted)
    first = picker.pick({"x-user": "u1"}, None)
    picker.served(first, "b")  # the gateway retried it onto b
    picker.release(first)
    assert picker.pick({"x-user": "u1"}, None).endpoints[0] == "b"


def test_the_spec_takes_weights_over_the_defaults_and_names_an_unknown_scorer():
    picker = EndpointPicker(pool="llm", scorers={"queue": 2, "session": 0})
    assert picker.weights() == {**SCORERS, "queue": 2.0, "session": 0.0}
    assert picker.metrics.path == "/metrics"
    assert picker.metrics.interval == 1.0
    assert EndpointPicker(pool="llm", metrics={"interval": "2s", "timeout": "250ms"}).metrics.timeout == 0.25
    with pytest.raises(ValueError, match=r"unknown scorer\(s\) \['prefix_cache'\]"):
        check_endpoint_picker(EndpointPicker(pool="llm", scorers={"prefix_cache": 1}), {}, False)
    with pytest.raises(ValueError, match="negative"):
        check_endpoint_picker(EndpointPicker(pool="llm", scorers={"queue": -1}), {}, False)
    assert parse_scorers(["queue=3", "kv_cache=0"]) == {**SCORERS, "queue": 3.0, "kv_cache": 0.0}
    with pytest.raises(ValueError, match="unknown scorer"):
        Wanted(pods={"v": PODS}, weights={"v": 1}, baseline="v", scorers={"lru": 1.0})


async def test_the_reader_records_readings_and_a_hanging_pod_costs_a_round_only_its_timeout():
    async def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "10.0.0.3":
            await asyncio.sleep(5)  # hangs
        if request.url.host == "10.0.0.2":
            return httpx.Response(500)
        return httpx.Response(200, text=VLLM)

    readings = Readings()
    pods = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    reader = MetricsReader(readings, lambda: pods, lambda: Scrape(port=9090, timeout=0.2), client=client)
    started = time.monotonic()
    await reader.read_once()
    assert time.monotonic() - started < 1.0
    now = time.monotonic()
    assert readings.fresh(now) == {"10.0.0.1:8000": parse(VLLM)}
    fallbacks = readings.fallbacks(pods, now)
    assert set(fallbacks) == {"10.0.0.2:8000", "10.0.0.3:8000"}
    assert "Timeout" in fallbacks["10.0.0.3:8000"]
    assert Scrape(port=9090).url("10.0.0.1:8000") == "http://10.0.0.1:9090/metrics"
    await client.aclose()
