"""The reference gateway (tests/support/reference_gateway.py), the stand-in for Istio or Envoy Gateway that
graystack's Gateway API data plane is tested against: a real Envoy it programs from the HTTPRoutes,
Services, EndpointSlices, InferencePools and Pods in the API stand-in, each upstream on a loopback address
of its own; the status it writes; the access log it sends; and each bug it can be told to have, seen in
what is served or written."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import pytest
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from gateway import names
from gateway.xds import types as xds_types
from graystack.local.processes import free_port, wait_until
from tests.support.kube_api import FakeApiServer
from tests.support.named_upstreams import NamedUpstream
from tests.support.reference_backends import Objects
from tests.support.reference_gateway import CONTROLLER, Bug, ReferenceGateway
from tests.support.reference_translation import Listen, translate

pytestmark = pytest.mark.integration

NAMESPACE = "serving"
GATEWAY = ("infra", "gw")
SERVICES = {"alpha": "127.0.0.2", "beta": "127.0.0.3"}
PODS = {"pod-a": ("127.0.0.4", "a"), "pod-b": ("127.0.0.5", "b")}  # name -> (IP, the pool it is in)
POOL_GROUP = "inference.networking.k8s.io"


class AccessLogSink(als_pb2_grpc.AccessLogServiceServicer):
    """The EnvoyProxy ALS sink's far end: every entry kept, with the log's name."""

    def __init__(self) -> None:
        self.entries: list[accesslog_pb2.HTTPAccessLogEntry] = []
        self.log_names: set[str] = set()
        self._lock = threading.Lock()

    def StreamAccessLogs(self, request_iterator, context) -> als_pb2.StreamAccessLogsResponse:
        for message in request_iterator:
            with self._lock:
                if message.HasField("identifier"):
                    self.log_names.add(message.identifier.log_name)
                self.entries.extend(message.http_logs.log_entry)
        return als_pb2.StreamAccessLogsResponse()

    def of(self, path: str) -> list[accesslog_pb2.HTTPAccessLogEntry]:
        with self._lock:
            return [entry for entry in self.entries if entry.request.path == path]


@dataclass
class Stand:
    api: FakeApiServer
    gateway: ReferenceGateway
    sink: AccessLogSink
    upstreams: dict[str, NamedUpstream] = field(default_factory=dict)


def service_objects(name: str, ip: str, port: int) -> list[dict[str, Any]]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-1",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
    }
    return [service, endpoints]


def pool_objects(name: str, ip: str, pool: str, port: int) -> list[dict[str, Any]]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"pool": pool}},
        "spec": {"containers": [{"name": "server", "image": "model-server"}]},
        "status": {"phase": "Running", "podIP": ip},
    }
    inference_pool = {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": {"name": f"pool-{pool}", "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": {"pool": pool}}, "targetPorts": [{"number": port}]},
    }
    return [pod, inference_pool]


@pytest.fixture(scope="module")
def stand(envoy_binary, tmp_path_factory) -> Iterator[Stand]:
    api = FakeApiServer().start()
    port = free_port()  # every upstream on it, each at its own address: a pool's targetPort is one number
    sink = AccessLogSink()
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(sink, server)
    als_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    logs = tmp_path_factory.mktemp("reference-gateway")
    gateway = ReferenceGateway(
        api, envoy_binary, logs, gateway=GATEWAY, namespaces=(NAMESPACE,), als=f"127.0.0.1:{als_port}"
    )
    running = Stand(api, gateway, sink)
    try:
        for name, ip in SERVICES.items():
            running.upstreams[name] = NamedUpstream(name, ip, port).start()
            for obj in service_objects(name, ip, port):
                api.put(obj)
        for name, (ip, pool) in PODS.items():
            running.upstreams[name] = NamedUpstream(name, ip, port).start()
            for obj in pool_objects(name, ip, pool, port):
                api.put(obj)
        gateway.start()
        yield running
    finally:
        gateway.stop()
        server.stop(grace=None)
        for upstream in running.upstreams.values():
            upstream.stop()
        api.stop()
        assert gateway.envoy is None or not gateway.envoy.alive(), (
            "the reference gateway's Envoy left running"
        )


@pytest.fixture
def gw(stand) -> Iterator[Stand]:
    """The stand, cleared after each test: its routes deleted, no bug."""
    yield stand
    for route in stand.api.list("HTTPRoute", NAMESPACE):
        stand.api.delete("HTTPRoute", NAMESPACE, route["metadata"]["name"])
    stand.gateway.bug = Bug.NONE


def service(name: str, weight: int = 1) -> dict[str, Any]:
    return {"name": name, "port": 80, "weight": weight}


def pool(name: str, weight: int = 1) -> dict[str, Any]:
    return {"group": POOL_GROUP, "kind": "InferencePool", "name": name, "weight": weight}


def write(api: FakeApiServer, name: str, rules: list[dict[str, Any]]) -> int:
    """The route (re)written, as kubectl apply would; its generation."""
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"parentRefs": [{"name": GATEWAY[1], "namespace": GATEWAY[0]}], "rules": rules},
    }
    return api.put(route)["metadata"]["generation"]


def conditions(api: FakeApiServer, name: str) -> dict[str, dict[str, Any]]:
    """The reference gateway's conditions on the route, by type."""
    route = api.get("HTTPRoute", NAMESPACE, name) or {}
    ours = [p for p in route.get("status", {}).get("parents", []) if p["controllerName"] == CONTROLLER]
    return {c["type"]: c for p in ours for c in p["conditions"]}


def generation_reported(api: FakeApiServer, name: str) -> int:
    return conditions(api, name).get("Accepted", {}).get("observedGeneration", 0)


def wait_reported(api: FakeApiServer, name: str, generation: int, timeout: float = 5.0) -> None:
    wait_until(lambda: generation_reported(api, name) >= generation, timeout, f"status at {generation}")


def served_by(gw: Stand, path: str, requests: int, headers: dict[str, str] | None = None) -> Counter[str]:
    """Which upstream answered each of `requests` requests (its name; `HTTP <code>` where none did)."""
    counts: Counter[str] = Counter()
    with httpx.Client(base_url=gw.gateway.listener_url, timeout=5) as client:
        for _ in range(requests):
            answer = client.get(path, headers=headers)
            counts[answer.text if answer.status_code == 200 else f"HTTP {answer.status_code}"] += 1
    return counts


def close_to(count: int, requests: int, share: float) -> bool:
    """Within 4.5 standard deviations of a binomial count (GIE's two-pool conformance test's bound)."""
    return abs(count - requests * share) <= 4.5 * (requests * share * (1 - share)) ** 0.5


def logged(gw: Stand, path: str, requests: int) -> list[accesslog_pb2.HTTPAccessLogEntry]:
    return wait_until(
        lambda: len(found := gw.sink.of(path)) >= requests and found, 10, f"{requests} log entries"
    )


def addresses(entries: Iterable[accesslog_pb2.HTTPAccessLogEntry]) -> Counter[str]:
    return Counter(e.common_properties.upstream_remote_address.socket_address.address for e in entries)


def test_a_weighted_rule_is_served_by_its_weights_and_logged_with_the_address_that_served(gw):
    generation = write(gw.api, "split", [{"backendRefs": [service("alpha", 80), service("beta", 20)]}])
    gw.gateway.wait_served(NAMESPACE, "split", generation)
    counts = served_by(gw, "/split", 400)
    assert close_to(counts["beta"], 400, 0.2), counts
    assert counts["alpha"] + counts["beta"] == 400, counts
    wait_reported(gw.api, "split", generation)
    found = conditions(gw.api, "split")
    assert {kind: (c["status"], c["observedGeneration"]) for kind, c in found.items()} == {
        "Accepted": ("True", generation),
        "ResolvedRefs": ("True", generation),
    }
    entries = logged(gw, "/split", 400)
    assert gw.sink.log_names == {names.ANSWER_LOG}
    assert addresses(entries) == {SERVICES[name]: count for name, count in counts.items()}
    assert {e.common_properties.upstream_cluster for e in entries} == {
        f"httproute/{NAMESPACE}/split/rule/0/backend/{j}" for j in (0, 1)
    }


def test_a_header_rule_takes_its_requests_before_an_earlier_rule_without_one(gw):
    beta_clients = {"matches": [{"headers": [{"name": "X-Client-Type", "value": "beta"}]}]}
    rules = [{"backendRefs": [service("alpha")]}, {**beta_clients, "backendRefs": [service("beta")]}]
    gw.gateway.wait_served(NAMESPACE, "segments", write(gw.api, "segments", rules))
    assert served_by(gw, "/segments", 30, {"X-Client-Type": "beta"}) == {"beta": 30}
    assert served_by(gw, "/segments", 30, {"X-Client-Type": "mobile"}) == {"alpha": 30}


def test_the_status_follows_each_write_and_zero_weights_mean_no_traffic(gw):
    for weights, served in (((1, 0), {"alpha": 20}), ((0, 3), {"beta": 20}), ((0, 0), {"HTTP 500": 20})):
        refs = [service("alpha", weights[0]), service("beta", weights[1])]
        generation = write(gw.api, "flips", [{"backendRefs": refs}])
        gw.gateway.wait_served(NAMESPACE, "flips", generation)
        assert served_by(gw, "/flips", 20) == served
        wait_reported(gw.api, "flips", generation)
        assert generation_reported(gw.api, "flips") == generation


def test_a_backend_that_is_not_there_is_reported_unresolved(gw):
    generation = write(gw.api, "ghost", [{"backendRefs": [service("ghost")]}])
    gw.gateway.wait_served(NAMESPACE, "ghost", generation)
    assert served_by(gw, "/ghost", 5) == {"HTTP 500": 5}
    wait_reported(gw.api, "ghost", generation)
    found = conditions(gw.api, "ghost")
    assert found["Accepted"]["status"] == "True"
    assert (found["ResolvedRefs"]["status"], found["ResolvedRefs"]["reason"]) == ("False", "BackendNotFound")
    assert f"Service {NAMESPACE}/ghost" in found["ResolvedRefs"]["message"]


def test_a_mirror_copies_its_fraction_of_the_requests(gw):
    mirror = {"backendRef": {"name": "beta", "port": 80}, "fraction": {"numerator": 1, "denominator": 2}}
    rule = {
        "backendRefs": [service("alpha")],
        "filters": [{"type": "RequestMirror", "requestMirror": mirror}],
    }
    gw.gateway.wait_served(NAMESPACE, "mirror", write(gw.api, "mirror", [rule]))
    before = gw.upstreams["beta"].hits
    assert served_by(gw, "/mirror", 200) == {"alpha": 200}
    copies = wait_until(lambda: settled(gw.upstreams["beta"]), 5, "the mirrored copies") - before
    assert close_to(copies, 200, 0.5), copies


def settled(upstream: NamedUpstream) -> int | None:
    """The upstream's hits once they stopped moving for a moment (None while they move)."""
    seen = upstream.hits
    time.sleep(0.3)
    return seen if upstream.hits == seen else None


def test_two_pools_split_by_weight_and_one_pool_for_rule_sends_all_to_the_first(gw):
    rules = [{"backendRefs": [pool("pool-a", 50), pool("pool-b", 50)]}]
    gw.gateway.wait_served(NAMESPACE, "pools", write(gw.api, "pools", rules))
    counts = served_by(gw, "/pools", 200)
    assert close_to(counts["pod-a"], 200, 0.5), counts
    assert counts["pod-a"] + counts["pod-b"] == 200, counts

    gw.gateway.bug = Bug.ONE_POOL_FOR_RULE  # istio#61594
    rules[0]["backendRefs"] = [pool("pool-a", 40), pool("pool-b", 60)]
    generation = write(gw.api, "pools", rules)
    gw.gateway.wait_served(NAMESPACE, "pools", generation)
    assert served_by(gw, "/pools-bug", 100) == {"pod-a": 100}
    wait_reported(gw.api, "pools", generation)
    assert conditions(gw.api, "pools")["Accepted"]["status"] == "True"
    entries = logged(gw, "/pools-bug", 100)
    assert {e.common_properties.upstream_cluster for e in entries} == {
        f"httproute/{NAMESPACE}/pools/rule/0/backend/{j}" for j in (0, 1)
    }, "the route splits between the pools' clusters"
    assert addresses(entries) == {PODS["pod-a"][0]: 100}, "but every answer came from the first pool's pod"


def test_ignores_weights_reports_each_generation_and_serves_the_first_weights(gw):
    generation = write(gw.api, "stuck", [{"backendRefs": [service("alpha", 1), service("beta", 0)]}])
    gw.gateway.wait_served(NAMESPACE, "stuck", generation)
    gw.gateway.bug = Bug.IGNORES_WEIGHTS
    generation = write(gw.api, "stuck", [{"backendRefs": [service("alpha", 0), service("beta", 1)]}])
    gw.gateway.wait_served(NAMESPACE, "stuck", generation)
    wait_reported(gw.api, "stuck", generation)
    assert served_by(gw, "/stuck", 20) == {"alpha": 20}


def test_first_backend_only_sends_a_rule_to_its_first_backend(gw):
    gw.gateway.bug = Bug.FIRST_BACKEND_ONLY
    generation = write(gw.api, "first", [{"backendRefs": [service("alpha", 20), service("beta", 80)]}])
    gw.gateway.wait_served(NAMESPACE, "first", generation)
    assert served_by(gw, "/first", 20) == {"alpha": 20}
    wait_reported(gw.api, "first", generation)


def test_accepted_late_reports_a_lag_after_the_data_plane_changed(gw):
    gw.gateway.bug, gw.gateway.lag = Bug.ACCEPTED_LATE, 1.0
    generation = write(gw.api, "late", [{"backendRefs": [service("beta")]}])
    gw.gateway.wait_served(NAMESPACE, "late", generation)
    served_at = time.monotonic()
    assert served_by(gw, "/late", 5) == {"beta": 5}
    assert generation_reported(gw.api, "late") < generation
    wait_reported(gw.api, "late", generation)
    assert time.monotonic() - served_at >= 0.5


def test_never_accepted_keeps_the_first_generation_it_saw(gw):
    first = write(gw.api, "silent", [{"backendRefs": [service("alpha")]}])
    wait_reported(gw.api, "silent", first)
    gw.gateway.bug = Bug.NEVER_ACCEPTED
    generation = write(gw.api, "silent", [{"backendRefs": [service("beta")]}])
    gw.gateway.wait_served(NAMESPACE, "silent", generation)
    assert served_by(gw, "/silent", 5) == {"beta": 5}
    time.sleep(1.0)  # five looks
    assert generation_reported(gw.api, "silent") == first


def test_matches_are_ordered_by_gateway_api_precedence_then_rule_order():
    rules = [
        {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [service("alpha")]},
        {"matches": [{"headers": [{"name": "x-a", "value": "1"}]}], "backendRefs": [service("beta")]},
        {"matches": [{"path": {"type": "Exact", "value": "/v1/models"}}], "backendRefs": [service("beta")]},
        {"matches": [{"path": {"type": "PathPrefix", "value": "/v1/"}}], "backendRefs": [service("alpha")]},
    ]
    route = {
        "metadata": {"name": "order", "namespace": NAMESPACE, "generation": 3},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}], "rules": rules},
    }
    other = {**route, "metadata": {"name": "elsewhere", "namespace": NAMESPACE}, "spec": {**route["spec"]}}
    other["spec"]["parentRefs"] = [{"name": "another-gateway"}]
    translation = translate(Objects(routes=[route, other]), Listen(GATEWAY, 8080))
    (config,) = translation.resources[xds_types.ROUTE]
    order = [entry.name.split("/")[4] for entry in config.virtual_hosts[0].routes]
    assert order == ["2", "3", "1", "0"]
    assert config.virtual_hosts[0].routes[3].match.prefix == "/"
    assert config.virtual_hosts[0].routes[1].match.path_separated_prefix == "/v1"
    assert list(translation.outcomes) == [(NAMESPACE, "order")]
    assert translation.outcomes[(NAMESPACE, "order")].generation == 3
