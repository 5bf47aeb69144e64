"""The split written into a user's HTTPRoute through the API server (gateway/kubernetes/routes.py), with
the official client, against the API stand-in (tests/support/kube_api.py: no real API server runs here),
which validates every HTTPRoute written against the vendored CRD, counts its generation and keeps its
status apart, as a server with Gateway API's CRDs installed does. The proof of acceptance is the
parents' conditions at the generation written; here the test writes them, as a gateway would."""

from __future__ import annotations

import copy
import threading

import pytest

from gateway.gatewayapi.routes import RouteError, rule_name
from gateway.kubernetes.api import api_client
from gateway.kubernetes.routes import CONFLICT_RETRIES, RouteWriter
from tests.support.kube_api import FakeApiServer
from tests.unit.test_gatewayapi_routes import ROUTE, SEGMENTS, spec

pytestmark = pytest.mark.integration


@pytest.fixture
def server():
    running = FakeApiServer().start()
    yield running
    running.stop()


@pytest.fixture
def writer(server, tmp_path) -> RouteWriter:
    return RouteWriter(api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig", "serving"))))


def installed(server: FakeApiServer) -> dict:
    route = copy.deepcopy(ROUTE)
    for key in ("resourceVersion", "generation"):
        route["metadata"].pop(key)
    return server.put(route)


def accept(server: FakeApiServer, generation: int) -> None:
    """The parent Gateway reports the route Accepted and resolved at `generation` (its status subresource)."""
    route = server.get("HTTPRoute", "serving", "llm")
    conditions = [
        {"type": kind, "status": "True", "reason": kind, "message": "", "observedGeneration": generation,
         "lastTransitionTime": "2026-12-06T00:00:00Z"}
        for kind in ("Accepted", "ResolvedRefs")
    ]  # fmt: skip
    parent = {
        "parentRef": {"name": "shared-gateway", "namespace": "infra"},
        "controllerName": "example.com/gw",
    }
    server.put({**route, "status": {"parents": [{**parent, "conditions": conditions}]}}, status=True)


def test_the_weights_are_written_with_the_version_read_and_proven_accepted_at_their_generation(
    server, writer
):
    first = installed(server)["metadata"]["generation"]
    (done,) = writer.apply(spec(**SEGMENTS))
    stored = server.get("HTTPRoute", "serving", "llm")
    assert done.generation == stored["metadata"]["generation"] == first + 1
    assert [r.get("weight") for r in stored["spec"]["rules"][0]["backendRefs"]] == [95, 5]
    assert stored["spec"]["rules"][-1]["name"] == rule_name("Internal QA")
    assert stored["metadata"]["annotations"] == ROUTE["metadata"]["annotations"]
    assert writer.not_accepted([done]) == [
        "HTTPRoute serving/llm: Gateway infra/shared-gateway has not reported on the route"
    ]
    accept(server, first)  # a gateway still on the route before the write
    assert writer.not_accepted([done]) == [
        f"HTTPRoute serving/llm: Gateway infra/shared-gateway: Accepted is of generation {first}, the write was {first + 1}",
        f"HTTPRoute serving/llm: Gateway infra/shared-gateway: ResolvedRefs is of generation {first}, the write was {first + 1}",
    ]
    accept(server, first + 1)
    assert writer.not_accepted([done]) == []
    assert writer.apply(spec(**SEGMENTS)) == [done]  # as asked already: not written again
    assert server.get("HTTPRoute", "serving", "llm")["metadata"]["generation"] == first + 1


def test_a_write_between_the_read_and_the_write_is_read_again_not_clobbered(server, writer):
    installed(server)
    original = writer.read
    raced = threading.Event()

    def read_then_someone_writes(ref):
        route = original(ref)
        if not raced.is_set():  # a person adds a label right after graystack's first read
            raced.set()
            current = server.get("HTTPRoute", "serving", "llm")
            current["metadata"]["labels"]["owner"] = "someone"
            server.put(current)
        return route

    writer.read = read_then_someone_writes
    writer.apply(spec())
    stored = server.get("HTTPRoute", "serving", "llm")
    assert stored["metadata"]["labels"]["owner"] == "someone"  # their change kept
    assert [r.get("weight") for r in stored["spec"]["rules"][0]["backendRefs"]] == [95, 5]  # ours made
    assert [entry.status for entry in server.log if entry.method == "PUT"] == [409, 200]


def test_a_conflict_that_keeps_coming_back_is_an_error_naming_the_route(server, writer):
    installed(server)
    original = writer.read

    def always_raced(ref):
        route = original(ref)
        current = server.get("HTTPRoute", "serving", "llm")
        current["metadata"]["labels"]["n"] = str(len(server.log))
        server.put(current)
        return route

    writer.read = always_raced
    with pytest.raises(RouteError, match=f"HTTPRoute serving/llm: {CONFLICT_RETRIES} conflicts in a row"):
        writer.apply(spec())


def test_a_route_that_does_not_exist_or_cannot_carry_the_split_is_named_and_nothing_is_written(
    server, writer
):
    with pytest.raises(RouteError, match="HTTPRoute serving/llm does not exist"):
        writer.apply(spec())
    route = installed(server)
    route["spec"]["rules"][0]["backendRefs"].pop()
    server.put(route)
    with pytest.raises(RouteError, match=r"has no backendRef for v2"):
        writer.apply(spec())
    assert [entry for entry in server.log if entry.method == "PUT"] == []


def test_the_end_removes_graystacks_rules_only(server, writer):
    installed(server)
    writer.apply(spec(**SEGMENTS))
    writer.release(spec(**SEGMENTS))
    stored = server.get("HTTPRoute", "serving", "llm")
    assert [r["name"] for r in stored["spec"]["rules"]] == ["chat", "embeddings"]


def test_the_stand_in_serves_gateways_and_inference_pools_as_their_crds_say(server, tmp_path):
    """What the driver reads beside the routes, through the official client: a Gateway and an
    InferencePool are kept as the real server keeps them, and one the CRD refuses is answered 422."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from gateway.kubernetes.api import call_json

    pool = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "llm-v2", "namespace": "serving"},
        "spec": {
            "selector": {"matchLabels": {"app": "llm", "version": "v2"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    }
    server.put(pool)
    objects = client.CustomObjectsApi(api_client(str(server.write_kubeconfig(tmp_path / "kubeconfig"))))
    read = call_json(
        objects.get_namespaced_custom_object,
        "inference.networking.k8s.io",
        "v1",
        "serving",
        "inferencepools",
        "llm-v2",
    )
    assert read["spec"]["selector"] == pool["spec"]["selector"]
    assert read["metadata"]["generation"] == 1
    broken = copy.deepcopy(pool)
    broken["metadata"]["name"] = "no-ports"
    del broken["spec"]["targetPorts"]
    with pytest.raises(ApiException) as refused:
        call_json(
            objects.create_namespaced_custom_object,
            "inference.networking.k8s.io",
            "v1",
            "serving",
            "inferencepools",
            broken,
        )
    assert getattr(refused.value, "status", None) == 422
    assert "InferencePool.spec: 'targetPorts' is a required property" in str(
        getattr(refused.value, "body", "")
    )
