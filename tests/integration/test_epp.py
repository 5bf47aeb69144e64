"""`graystack epp` inside a GIE gateway's data plane on the real Envoy 1.40, in both shapes gateways use
(tests/support/gie_data_plane.py: ORIGINAL_DST reading the header; override_host reading `envoy.lb`), with
one loopback address per pod, as GIE's conformance tests treat an IP as a pod. The picker's choice comes
from the rollout's split: a cohort kept, a flip reaching the next request, a fallback when the pick is down,
GIE's test headers ignored unless asked for; bad input: bodies that are not JSON routed, a pod that vanishes
mid-stream; and the command itself (TLS, gRPC health). GIE's own conformance scenarios, and the subset hint
and fail-open/closed, are in test_gie_conformance_epp.py."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest
import yaml

from gateway.epp.conformance import SELECTION, SERVED
from gateway.epp.health import EXT_PROC, SERVICE, Request, Response
from gateway.epp.picker import Picker
from gateway.epp.wanted import Wanted
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from tests.support.epp_gateway import BODY, running
from tests.support.gie_data_plane import DataPlane, PickerAddress, bootstrap
from tests.support.named_upstreams import NAME_HEADER, NamedUpstream, serving
from tests.support.picker_thread import PickerThread

pytestmark = pytest.mark.integration

PORT = free_port()  # every pod on the same target port, each on its own address (IP = pod)
HOSTS = {
    "pod-0": "127.0.7.2",
    "pod-1": "127.0.7.3",
    "pod-2": "127.0.7.4",
    "pod-3": "127.0.7.5",
    "pod-4": "127.0.7.6",
}
ADDRESS = {name: f"{host}:{PORT}" for name, host in HOSTS.items()}
POOL = {"baseline": ("pod-0", "pod-1", "pod-2"), "zero-layer": ("pod-3", "pod-4")}
DEAD = f"127.0.7.9:{PORT}"  # a pod still listed in the pool whose server is gone: nothing listens there
STREAMING = {"stream-0": "127.0.7.10", "stream-1": "127.0.7.11", "stream-2": "127.0.7.12"}  # a test's own
ENDPOINTS = [*ADDRESS.values(), *(f"{host}:{PORT}" for host in STREAMING.values())]  # override_host's members


def wanted(weights: dict[str, int], pool: dict[str, tuple[str, ...]] = POOL, **kw: object) -> Wanted:
    pods = {variant: tuple(ADDRESS[name] for name in names) for variant, names in pool.items()}
    return Wanted(pods=pods, weights=weights, baseline=next(iter(pool)), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("profile", "tls"),
    [(p, t) for p in ("original_dst", "override_host") for t in (False, True)]
    + [("round_robin", False), ("least_request", False)],
)
def test_the_data_plane_passes_envoys_validation(envoy_binary, tmp_path, profile, tls):
    config = tmp_path / "envoy.yaml"
    config.write_text(
        yaml.safe_dump(bootstrap(profile, 1, 2, PickerAddress(3, tls), list(ADDRESS.values()), True))
    )
    check = subprocess.run(
        [envoy_binary, "--mode", "validate", "-c", str(config), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]


@pytest.fixture(scope="module")
def pods():
    yield from serving(HOSTS, PORT)


@pytest.fixture(scope="module", params=["original_dst", "override_host"])
def gateway(request, pods, envoy_binary, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    with running(envoy_binary, folder, request.param, ENDPOINTS, wanted({"baseline": 100})) as gw:
        yield gw


@pytest.fixture
def gw(gateway):
    """The module's gateway, fed the baseline at 100 % and its outcomes cleared."""
    return gateway.reset(wanted({"baseline": 100}))


def test_a_cohort_stays_on_one_variant(gw):
    gw.now = wanted({"baseline": 50, "zero-layer": 50}, cohort_header="x-user")
    variant_of = {name: variant for variant, names in POOL.items() for name in names}
    seen = {}
    for user in range(16):
        variants = {variant_of[name] for name in gw.served_by(8, {"x-user": f"user-{user}"})}
        assert len(variants) == 1, (user, variants)
        seen[user] = variants.pop()
    assert set(seen.values()) == set(POOL)  # both variants hold some cohorts


def test_a_flip_reaches_the_next_request(gw):
    """No reconcile, no restart: the very next request after the feed changes takes the new split, and a
    cohort on the candidate at 20 % is still on it at 50 %."""
    assert set(gw.served_by(5)) <= set(POOL["baseline"])
    gw.now = wanted({"zero-layer": 100})
    assert set(gw.served_by(1)) <= set(POOL["zero-layer"])
    gw.now = wanted({"baseline": 100})
    assert set(gw.served_by(1)) <= set(POOL["baseline"])
    users = [{"x-user": f"user-{i}"} for i in range(30)]
    gw.now = wanted({"baseline": 80, "zero-layer": 20}, cohort_header="x-user")
    at_20 = {i for i, user in enumerate(users) if gw.served_by(1, user)[0] in POOL["zero-layer"]}
    gw.now = wanted({"baseline": 50, "zero-layer": 50}, cohort_header="x-user")
    at_50 = {i for i, user in enumerate(users) if gw.served_by(1, user)[0] in POOL["zero-layer"]}
    assert at_20
    assert at_20 <= at_50


def test_a_body_that_is_not_json_is_routed(gw):
    """The pick needs no body: not JSON, binary, large (streamed in chunks through the picker), or none."""
    for body in (b"not json", bytes(range(256)) * 4, b"x" * 300_000, b""):
        assert gw.served_by(1, body=body)[0] in POOL["baseline"]
    assert gw.client.get(gw.url).status_code == 200


@pytest.mark.parametrize("gateway", ["override_host"], indirect=True)
def test_a_pod_that_vanishes_mid_stream_fails_only_its_own_streams(gw):
    """Six answers streaming from three pods; one pod is killed mid-answer. Its clients get their error
    (the stream cut, never a whole answer; Envoy closes their connections after its delayed-close second),
    the others finish; every stream's count is released; the next requests are all served by the two pods
    left, before the pool's next read drops the pod (override_host: the list's next pod serves the retry)
    and after it. ORIGINAL_DST shares the picker's part; a pick of the pod gone is a 503 there until that
    read (gateway/kubernetes/pool.py, shown in test_epp_rollout.py: a pod no longer ready takes no more)."""
    release = threading.Event()
    pods = {name: NamedUpstream(name, host, PORT) for name, host in STREAMING.items()}
    for pod in pods.values():
        pod.stream = release
        pod.start()
    endpoint = {name: f"{host}:{PORT}" for name, host in STREAMING.items()}
    gw.now = Wanted(
        pods={"baseline": tuple(endpoint.values())}, weights={"baseline": 100}, baseline="baseline"
    )
    begun = threading.Semaphore(0)

    def stream(i: int) -> tuple[str, bytes | Exception]:
        body = b'{"model": "m", "prompt": "%d", "stream": true}' % i
        with gw.client.stream("POST", f"{gw.url}/v1/completions", content=body) as answer:
            chunks = answer.iter_raw()
            received = next(chunks)
            begun.release()
            try:
                return answer.headers[NAME_HEADER], received + b"".join(chunks)
            except httpx.HTTPError as error:
                return answer.headers[NAME_HEADER], error

    try:
        with ThreadPoolExecutor(6) as pool:
            futures = []
            for i in range(6):  # one at a time, each streaming before the next is sent
                futures.append(pool.submit(stream, i))
                assert begun.acquire(timeout=10)
            assert sum(gw.picker.in_flight().values()) == 6
            pods["stream-0"].kill()
            release.set()
            results = [future.result() for future in futures]
        assert {name for name, _ in results} == set(STREAMING)
        for name, result in results:
            if name == "stream-0":
                assert isinstance(result, httpx.RemoteProtocolError | httpx.ReadError), result
            else:
                assert result == f"data: {name}\n\ndata: [DONE]\n\n".encode()
        wait_until(lambda: not gw.picker.in_flight(), 10, "every stream's count released")
        assert set(gw.served_by(6)) == {"stream-1", "stream-2"}
        gw.now = Wanted(
            pods={"baseline": (endpoint["stream-1"], endpoint["stream-2"])},
            weights={"baseline": 100},
            baseline="baseline",
        )
        assert set(gw.served_by(6)) == {"stream-1", "stream-2"}
    finally:
        release.set()
        for pod in pods.values():
            pod.stop()


def test_gies_test_headers_are_ignored_unless_asked_for(gw):
    """A client cannot steer the picker: without `--conformance-test-headers` the pod named is one pick
    among the variant's, and the answer does not say which pod served."""
    answers = [gw.post({SELECTION: HOSTS["pod-0"]}) for _ in range(6)]
    assert {answer.headers[NAME_HEADER] for answer in answers} == set(POOL["baseline"])
    assert not any(SERVED in answer.headers for answer in answers)


@pytest.mark.parametrize("gateway", ["override_host"], indirect=True)
def test_a_fallback_serves_when_the_pick_is_down_and_the_picker_hears_which(gw):
    """override_host: when the picked pod refuses the connection, the retry goes to the list's next pod,
    and the gateway reports that one as served (the picker's count moves to it). ORIGINAL_DST takes one
    address and reports nothing (test_original_dst_cannot_read_a_list)."""
    gw.now = Wanted(
        pods={"baseline": (DEAD, ADDRESS["pod-0"])}, weights={"baseline": 100}, baseline="baseline"
    )
    assert set(gw.served_by(6)) == {"pod-0"}
    wait_until(lambda: len(gw.outcomes) == 6, 5, "every stream's end")
    assert {o.served for o in gw.outcomes} == {ADDRESS["pod-0"]}
    assert DEAD in {o.picked for o in gw.outcomes}  # ties taken in turn: the dead pod was picked first


def test_original_dst_cannot_read_a_list(pods, envoy_binary, tmp_path):
    """Envoy 1.40's ORIGINAL_DST cluster parses the header as one address: a list (pick, fallbacks) finds
    no host and is answered 503. Hence `graystack epp --fallbacks 0` by default."""
    picker = PickerThread(Picker(lambda: wanted({"baseline": 100})), fallbacks=1).start()
    plane = DataPlane(envoy_binary, tmp_path, "original_dst", PickerAddress(picker.port), [])
    try:
        plane.start()
        assert httpx.post(plane.url, content=BODY, timeout=10).status_code == 503
    finally:
        plane.stop()
        picker.stop()


def _health(port: int, service: str) -> int | grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = channel.unary_unary(
            f"/{SERVICE}/Check",
            request_serializer=Request.SerializeToString,
            response_deserializer=Response.FromString,
        )
        try:
            return check(Request(service=service), timeout=2).status
        except grpc.RpcError as error:
            return error.code()


def test_graystack_epp_serves_tls_by_default_and_grpc_health(pods, envoy_binary, tmp_path):
    """The command as a process: TLS with a certificate it made at start, which Envoy dials as gateways
    do (TLS, any certificate accepted); health on its own port, plaintext, with GIE's service names; its
    counters on a port of their own."""
    port, health_port, prometheus_port = free_port(), free_port(), free_port()
    argv = [sys.executable, "-m", "graystack", "epp", "--port", str(port), "--health-port", str(health_port)]
    argv += ["--pods", f"baseline={ADDRESS['pod-0']}", "--pods", f"zero-layer={ADDRESS['pod-3']}"]
    argv += ["--prometheus-port", str(prometheus_port)]
    argv += ["--split", "baseline=0,zero-layer=100", "--conformance-test-headers"]
    picker: ManagedProcess = start_process("epp", argv, tmp_path)
    plane = DataPlane(
        envoy_binary, tmp_path, "override_host", PickerAddress(port, tls=True), list(ADDRESS.values())
    )
    try:
        picker.wait_healthy(lambda: _health(health_port, "readiness") == 1, 30, "the picker's readiness")
        assert [_health(health_port, s) for s in ("liveness", "", EXT_PROC)] == [1, 1, 1]
        assert _health(health_port, "nonesuch") == grpc.StatusCode.NOT_FOUND
        plane.start()
        answer = httpx.post(plane.url, content=BODY, timeout=10)
        assert (answer.status_code, answer.headers.get(NAME_HEADER)) == (200, "pod-3"), answer.text
        assert answer.headers[SERVED] == ADDRESS["pod-3"]  # GIE's test headers, asked for
        refused = httpx.post(plane.url, content=BODY, headers={SELECTION: HOSTS["pod-0"]}, timeout=10)
        assert refused.status_code == 503  # only the baseline's pod named, the baseline at 0 %
        counters = httpx.get(f"http://127.0.0.1:{prometheus_port}/metrics", timeout=5).text
        assert 'graystack_epp_picks_total{variant="zero-layer"} 1.0' in counters.splitlines()
        plaintext = grpc.insecure_channel(f"127.0.0.1:{port}")  # TLS only: a plaintext channel never connects
        with plaintext, pytest.raises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(plaintext).result(timeout=1)
    finally:
        plane.stop()
        picker.stop()
    assert not picker.alive()
