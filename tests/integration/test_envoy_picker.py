"""graystack's own Envoy, programmed by the real gateway, asking the picker for each request's pod within
the variant its split chose (the spec's `envoy_picker`, gateway/envoy/picking.py). Two pods per variant
on loopback addresses of their own, each exporting vLLM's queue gauge, one of each pair with a queue:
every request reaches its variant's idle pod, though the picker's own split would send every request to
the baseline (it never draws the variant again), and a pick outside the variant would have been served
by round robin (the busy pod half the time). With the picker stopped, the clusters serve by their own
round robin (fail-open). The same with the picker the gateway serves itself (`serve: true`), no picker
started beside it: its pods are those it gives Envoy, its split and metrics read live, and it counts a
streamed answer in flight to its last chunk (Envoy's access log ends the count), where a picker of its
own process counts it to its first. And why the
picker is refused beside `retries.fallback`."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.epp.conformance import SELECTION
from gateway.epp.picker import Picker
from gateway.epp.wanted import Wanted
from graystack.local.gateway_stack import INFERENCE_PATH, GatewayStack, Running, default_spec
from graystack.local.processes import free_port, wait_until
from tests.support.gie_data_plane import DataPlane, PickerAddress
from tests.support.metered_picker import reading, vllm
from tests.support.named_upstreams import NAME_HEADER, NamedUpstream, serving
from tests.support.picker_thread import PickerThread
from tests.support.stacks import running

pytestmark = pytest.mark.integration

PORT = free_port()
HOSTS = {"base-busy": "127.0.9.1", "base-idle": "127.0.9.2", "zl-busy": "127.0.9.3", "zl-idle": "127.0.9.4"}
VARIANTS = {"baseline": ("base-busy", "base-idle"), "zero-layer": ("zl-busy", "zl-idle")}
ADDRESS = {name: f"{host}:{PORT}" for name, host in HOSTS.items()}
TO_ZERO_LAYER = {"X-Client-Type": "high_load"}  # the stack's header rule


@pytest.fixture
def pods() -> Iterator[dict[str, NamedUpstream]]:
    yield from serving(HOSTS, PORT)


@pytest.fixture
def stack(tmp_path, envoy_binary) -> Iterator[GatewayStack]:
    yield from running(GatewayStack(tmp_path, envoy_binary))


def picked(spec: dict[str, Any], picker: dict[str, Any]) -> dict[str, Any]:
    """`spec` with the variants on the four pods, split 50/50, Envoy asking `picker`."""
    spec["variants"] = {
        variant: {"endpoints": [ADDRESS[name] for name in names], "health_check": None}
        for variant, names in VARIANTS.items()
    }
    spec["routing"]["weights"] = {"baseline": 50, "zero-layer": 50}
    spec["envoy_picker"] = picker
    spec["retries"]["fallback"] = None  # the aggregate cluster drops the pick (gateway/spec/envoy_picker.py)
    return spec


def ask_picker(stack: GatewayStack, port: int) -> None:
    """The variants on the four pods, split 50/50, Envoy asking the picker on `port` (plaintext)."""
    spec = picked(stack.spec, {"host": "127.0.0.1", "port": port, "tls": False})
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def served(stack: GatewayStack, n: int, headers: dict[str, str] | None = None) -> Counter[str]:
    """Which pod answered each of `n` requests through graystack's Envoy (each checked on its variant), on
    new connections: one opened before the picker was asked keeps the listener's old filters until it
    drains."""
    pods: Counter[str] = Counter()
    for _ in range(n):
        answer = httpx.post(
            f"http://127.0.0.1:{stack.ports['listen']}{INFERENCE_PATH}", json={}, headers=headers
        )
        assert answer.status_code == 200, answer.text
        pod = answer.headers[NAME_HEADER]
        assert pod in VARIANTS[answer.headers["x-graystack-variant"]]
        pods[pod] += 1
    return pods


def released_at_the_answers_headers(stack: GatewayStack, pod: NamedUpstream, picker: Picker) -> None:
    """A streamed answer leaves the picker's in-flight count once its headers are through, while its body
    still streams: Envoy closes the picker's stream when it has nothing more to send it (no body goes)."""
    pod.stream = threading.Event()
    url = f"http://127.0.0.1:{stack.ports['listen']}{INFERENCE_PATH}"
    with httpx.stream("POST", url, json={}, headers=TO_ZERO_LAYER, timeout=10) as answer:
        assert answer.headers[NAME_HEADER] == pod.name
        wait_until(lambda: not picker.in_flight(), 5, "the count released")
        assert not answer.is_closed
        pod.stream.set()
        answer.read()
    pod.stream = None


def test_the_picker_places_each_request_within_the_variant_envoy_chose(pods, stack):
    for name, pod in pods.items():
        pod.metrics = vllm(waiting=12 if "busy" in name else 0, kv=0.5)
    pickers_own = {"baseline": 100, "zero-layer": 0}  # never drawn: Envoy names the variant
    wanted = Wanted(
        pods={v: tuple(ADDRESS[name] for name in names) for v, names in VARIANTS.items()},
        weights=pickers_own,
        baseline="baseline",
    )
    with reading(wanted, list(ADDRESS.values())) as read:
        wait_until(lambda: len(read.readings.fresh(time.monotonic())) == 4, 5, "the pods' readings")
        ask_picker(stack, read.thread.port)
        assert served(stack, 10, TO_ZERO_LAYER) == {"zl-idle": 10}
        split = served(stack, 30)
        assert set(split) == {"base-idle", "zl-idle"}, split
        released_at_the_answers_headers(stack, pods["zl-idle"], read.picker)

    # the picker down: every request still served, by each variant's round robin over both its pods
    down = served(stack, 12, TO_ZERO_LAYER) + served(stack, 30)
    assert set(down) == set(HOSTS), down


def held_to_the_answers_end(stack: GatewayStack, pod: NamedUpstream) -> None:
    """The picker the gateway serves counts a streamed answer in flight until its last chunk, though Envoy
    closed the picker's stream at the pick: the access log Envoy sends it ends the count."""
    pod.stream = threading.Event()
    url = f"http://127.0.0.1:{stack.ports['listen']}{INFERENCE_PATH}"
    with httpx.stream("POST", url, json={}, headers=TO_ZERO_LAYER, timeout=10) as answer:
        assert answer.headers[NAME_HEADER] == pod.name
        time.sleep(0.5)  # five of the picker log's flushes: a count ended at the pick would be gone
        assert stack.status()["picker"]["in_flight"] == {ADDRESS[pod.name]: 1}
        pod.stream.set()
        answer.read()
    pod.stream = None
    wait_until(lambda: not stack.status()["picker"]["in_flight"], 5, "the count released")


@pytest.fixture
def serving_stack(pods, tmp_path, envoy_binary) -> Iterator[GatewayStack]:
    """The stack on the four pods, one of each variant's with a queue, its gateway serving the picker (TLS,
    self-signed: the default)."""
    for name, pod in pods.items():
        pod.metrics = vllm(waiting=12 if "busy" in name else 0, kv=0.5)
    picker = {
        "host": "127.0.0.1",
        "port": free_port(),
        "serve": True,
        "metrics": {"interval": 0.2, "timeout": 0.1},
    }
    # the `pods` fixture's pods, the gateway started on a spec that has it serve the picker: the socket it
    # binds is fixed at its start (gateway/service.py)
    upstreams = Running(picked(default_spec(0, 0), picker))
    yield from running(GatewayStack(tmp_path, envoy_binary, upstreams=upstreams))


def test_the_gateway_serves_its_own_envoys_picker(pods, serving_stack):
    """No picker started beside the stack: the gateway serves it, its pods the endpoints it gives Envoy,
    its split and the pods' queues read live."""
    stack = serving_stack
    wait_until(lambda: not stack.status()["picker"]["fallbacks"], 10, "the picker's readings of the pods")
    status = stack.status()["picker"]
    assert (status["envoy"], status["ready"]) == (True, True)
    assert status["pods"] == {v: sorted(ADDRESS[name] for name in names) for v, names in VARIANTS.items()}
    assert served(stack, 10, TO_ZERO_LAYER) == {"zl-idle": 10}
    split = served(stack, 30)
    assert set(split) == {"base-idle", "zl-idle"}, split
    wait_until(lambda: not stack.status()["picker"]["in_flight"], 5, "each answered request's count ended")
    held_to_the_answers_end(stack, pods["zl-idle"])

    spec, generation = stack.spec, stack.status()["generation"]
    spec["routing"]["weights"] = {"baseline": 0, "zero-layer": 100}
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)
    assert served(stack, 20) == {"zl-idle": 20}

    pods["zl-idle"].metrics, pods["zl-busy"].metrics = pods["zl-busy"].metrics, pods["zl-idle"].metrics
    wait_until(lambda: served(stack, 1) == {"zl-busy": 1}, 5, "picks following the queues")
    assert served(stack, 10) == {"zl-busy": 10}


@pytest.mark.parametrize(
    ("profile", "followed"), [("override_host", True), ("override_host_aggregate", False)]
)
def test_behind_an_aggregate_cluster_the_pick_is_lost(pods, envoy_binary, tmp_path, profile, followed):
    """Why `envoy_picker` is refused beside `retries.fallback` (gateway/spec/envoy_picker.py): on Envoy 1.40
    override_host follows the picker, but behind an aggregate cluster, the shape a fallback needs, it never
    sees the pick, and its round robin serves (GIE's data plane shape, tests/support/gie_data_plane.py,
    the pick forced by GIE's test header)."""
    members = [ADDRESS["zl-busy"], ADDRESS["zl-idle"]]
    wanted = Wanted(pods={"zero-layer": tuple(members)}, weights={"zero-layer": 100}, baseline="zero-layer")
    thread = PickerThread(Picker(lambda: wanted), test_headers=True).start()
    plane = DataPlane(envoy_binary, tmp_path, profile, PickerAddress(thread.port), members)
    try:
        plane.start()
        answers = [
            httpx.post(f"{plane.url}{INFERENCE_PATH}", json={}, headers={SELECTION: ADDRESS["zl-idle"]})
            for _ in range(10)
        ]
    finally:
        plane.stop()
        thread.stop()
    served = {answer.headers[NAME_HEADER] for answer in answers}
    assert served == ({"zl-idle"} if followed else {"zl-idle", "zl-busy"})
