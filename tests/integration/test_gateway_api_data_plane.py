"""The rollout's edge on the user's Gateway API gateway (gateway/kubernetes/gateway_api.py): the split
written into the HTTPRoute, the control plane's proof from the route's status, and the data plane's from
the access log's upstream hosts, through the official client against the API stand-in
(tests/support/kube_api.py; no real API server runs here). The gateway's part (its status conditions and
its access log) is played by the test here; tests/integration/test_gateway_api_rollout.py has a real
Envoy programmed by the reference translator do it."""

from __future__ import annotations

import copy
import time

import pytest
from envoy.data.accesslog.v3 import accesslog_pb2

from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from gateway.kubernetes.api import api_client
from gateway.kubernetes.gateway_api import GatewayApiDataPlane
from gateway.rollout.rollout_state import CONTROL_PLANE, DATA_PLANE
from gateway.spec.gateway_api import BackendRef, RouteRef
from gateway.spec.model import RolloutSpec
from tests.integration.test_gatewayapi_writer import accept, installed
from tests.unit.test_gatewayapi_routes import spec as route_spec

pytestmark = pytest.mark.integration

PODS = {"llm-v1": ["10.1.0.1", "10.1.0.2"], "llm-v2": ["10.2.0.1"]}


def spec(**routing: object) -> RolloutSpec:
    """The routes' spec with no `settle`: the test plays the gateway, and serves a split the moment it
    accepts it (test_gateway_api_bugs.py has a gateway that programs its proxy later)."""
    live = route_spec(**routing)
    assert live.gateway_api is not None
    return live.model_copy(update={"gateway_api": live.gateway_api.model_copy(update={"settle": 0.0})})


@pytest.fixture
def server():
    from tests.support.kube_api import FakeApiServer

    running = FakeApiServer().start()
    yield running
    running.stop()


def slices(server) -> None:
    for service, addresses in PODS.items():
        server.put(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{service}-abcde",
                    "namespace": "serving",
                    "labels": {"kubernetes.io/service-name": service},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
                "ports": [{"port": 8000}],
            }
        )


class Edge:
    """The data plane edge with the answer receiver it places answers for, as the gateway wires them."""

    def __init__(self, server, tmp_path, live: RolloutSpec) -> None:
        self.live = live
        self.store = AnswerStore()
        api = api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig", "serving")))
        self.plane = GatewayApiDataPlane(api, self.store, lambda: self.live)
        self.receiver = AnswerReceiver(self.store, placement=self.plane)

    async def look(self):
        return await self.plane.look(self.live, time.time())

    def served(self, host: str, count: int, headers: dict[str, str] | None = None) -> None:
        """`count` answers the gateway logged as served by `host` ("" : no upstream), started now."""
        for _ in range(count):
            entry = accesslog_pb2.HTTPAccessLogEntry()
            common = entry.common_properties
            common.start_time.FromMicroseconds(int(time.time() * 1e6))
            common.upstream_cluster = "httproute/serving/llm/rule/0" if host else ""
            if host:
                address, port = host.rsplit(":", 1)
                common.upstream_remote_address.socket_address.address = address
                common.upstream_remote_address.socket_address.port_value = int(port)
            entry.response.response_code.value = 200
            entry.request.request_headers.update(headers or {})
            self.receiver.take(entry)


@pytest.fixture
def edge(server, tmp_path) -> Edge:
    installed(server)
    slices(server)
    return Edge(server, tmp_path, spec())


async def test_each_change_waits_for_the_gateway_then_for_the_answers_split(server, edge):
    gate = await edge.look()
    route = server.get("HTTPRoute", "serving", "llm")
    assert [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]] == [95, 5]
    assert (gate.waiting_on, gate.refuted) == (CONTROL_PLANE, False)
    assert "Gateway infra/shared-gateway has not reported on the route" in gate.reason
    edge.served("10.2.0.1:8000", 50)  # the gateway may still serve the split before its acceptance
    accept(server, route["metadata"]["generation"])
    gate = await edge.look()
    assert gate.waiting_on == DATA_PLANE  # accepted; no answer since
    edge.served("10.1.0.1:8000", 400)
    edge.served("10.1.0.2:8000", 400)
    gate = await edge.look()
    assert (gate.waiting_on, gate.refuted) == (DATA_PLANE, True), gate.reason
    assert gate.reason.startswith("v2: 5% asked, 0 of 800 answers from the candidate's endpoints")


async def test_the_asked_split_served_is_proven_and_header_segments_are_left_out(server, edge):
    await edge.look()
    accept(server, server.get("HTTPRoute", "serving", "llm")["metadata"]["generation"])
    await edge.look()
    edge.served("10.2.0.1:8000", 100)
    edge.served("10.1.0.1:8000", 1900)
    edge.served("10.2.0.1:8000", 500, {"x-client-type": "beta"})  # no such segment here: counted as default
    gate = await edge.look()
    assert gate.waiting_on == DATA_PLANE  # 600 of 2500 is 24 %: not the 5 % asked
    assert gate.refuted
    edge.live = spec(rules=[{"value": "beta", "weights": {"v1": 50, "v2": 50}}])
    await edge.look()  # a new split written: the proofs start again
    accept(server, server.get("HTTPRoute", "serving", "llm")["metadata"]["generation"])
    await edge.look()
    edge.served("10.2.0.1:8000", 100)
    edge.served("10.1.0.2:8000", 1900)
    edge.served("10.2.0.1:8000", 500, {"X-Client-Type": "beta"})  # the segment's own rule: not the default's
    gate = await edge.look()
    assert gate.proven, gate.reason


async def test_answers_no_variants_endpoint_served_are_said_and_not_counted(server, edge):
    await edge.look()
    accept(server, server.get("HTTPRoute", "serving", "llm")["metadata"]["generation"])
    await edge.look()
    edge.served("", 3)
    edge.served("10.9.9.9:8000", 2)
    gate = await edge.look()
    assert gate.reason.endswith(
        "0 of 0 answers from the candidate's endpoints (shown within 2.5%-7.5%); answers no variant's "
        "endpoint served: 3 with no upstream host in the access log, 2 from 10.9.9.9"
    )
    assert (edge.store.counts.kept, edge.store.counts.ignored) == (0, 5)


@pytest.mark.parametrize("on_drift", ["restore", "hold"])
async def test_weights_someone_else_changed_are_restored_or_held_as_the_spec_says(server, edge, on_drift):
    edge.live = spec().model_copy(
        update={"gateway_api": spec().gateway_api.model_copy(update={"on_drift": on_drift})}
    )
    await edge.look()
    accept(server, server.get("HTTPRoute", "serving", "llm")["metadata"]["generation"])
    reverted = copy.deepcopy(server.get("HTTPRoute", "serving", "llm"))
    reverted["spec"]["rules"][0]["backendRefs"][0]["weight"] = 1  # a GitOps tool's sync
    reverted["spec"]["rules"][0]["backendRefs"][1]["weight"] = 0
    server.put(reverted)
    gate = await edge.look()
    weights = [
        r["weight"] for r in server.get("HTTPRoute", "serving", "llm")["spec"]["rules"][0]["backendRefs"]
    ]
    if on_drift == "restore":
        assert weights == [95, 5]
        assert (gate.waiting_on, gate.refuted) == (CONTROL_PLANE, False)  # the new generation's proofs
    else:
        assert weights == [1, 0]
        assert (gate.waiting_on, gate.refuted) == (CONTROL_PLANE, True)
        assert gate.reason == (
            "someone else changed the rollout's weights: llm: rule chat: v1's weight is 1, the rollout's 95; "
            "llm: rule chat: v2's weight is 0, the rollout's 5"
        )


async def test_a_route_that_does_not_exist_is_refused_by_name(server, tmp_path):
    slices(server)
    gate = await Edge(server, tmp_path, spec()).look()
    assert (gate.waiting_on, gate.refuted, gate.reason) == (
        CONTROL_PLANE,
        True,
        "HTTPRoute serving/llm does not exist",
    )


async def test_an_inference_pool_that_does_not_exist_is_refused_by_name(server, tmp_path):
    installed(server)
    pooled = spec().model_copy(
        update={
            "gateway_api": spec().gateway_api.model_copy(
                update={
                    "backends": {
                        **spec().gateway_api.backends,
                        "v2": BackendRef(kind="InferencePool", name="llm-v2-pool"),
                    }
                }
            )
        }
    )
    gate = await Edge(server, tmp_path, pooled).look()
    assert (gate.waiting_on, gate.refuted) == (CONTROL_PLANE, True)
    assert gate.reason == "InferencePool serving/llm-v2-pool does not exist"


async def test_a_route_the_spec_no_longer_names_is_released_of_graystacks_rules(server, edge):
    second = copy.deepcopy(server.get("HTTPRoute", "serving", "llm"))
    for key in ("resourceVersion", "generation", "uid", "creationTimestamp"):
        second["metadata"].pop(key, None)
    second["metadata"]["name"] = "llm-b"
    server.put(second)
    both = spec(rules=[{"value": "beta", "weights": {"v1": 50, "v2": 50}}])
    api = both.gateway_api
    edge.live = both.model_copy(
        update={
            "gateway_api": api.model_copy(
                update={"routes": [*api.routes, RouteRef(name="llm-b", namespace="serving")]}
            )
        }
    )
    await edge.look()
    assert [len(server.get("HTTPRoute", "serving", n)["spec"]["rules"]) for n in ("llm", "llm-b")] == [3, 3]
    edge.live = both  # llm-b dropped from the spec
    await edge.look()
    assert [len(server.get("HTTPRoute", "serving", n)["spec"]["rules"]) for n in ("llm", "llm-b")] == [3, 2]
