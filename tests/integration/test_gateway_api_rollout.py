"""A whole rollout on the user's own Gateway API gateway (issue 36): `graystack kube-gateway` (in-process,
against the API stand-in: no real API server runs here) drives the user's HTTPRoute, served by the
reference gateway (tests/support/reference_gateway.py: the stand-in for Istio or Envoy Gateway, a real
Envoy it programs from the route) and measured by the gateway's own access log, which reaches graystack's
receiver on its xDS port as Envoy Gateway's EnvoyProxy ALS sink sends it. The variants are named otherwise
than their Services (`stable` is `llm-v1`, `canary` `llm-v2`), the route holds a rule and a filter of
someone else's, and a header segment has a rule of its own.

What it shows: the shadow stage writes the standard RequestMirror filter and the canary's servers get the
copies (the copies are not in the gateway's access log: no answer from them is judged, so the stage moves
by an operator's promote here); each step is entered only once the gateway is proven to serve it (the
"Holding" Events say so); a restart mid-rollout resumes the same step without writing the route again;
after the promotion a fault on the canary rolls it back, and the rollback is done only once the answers
show the canary's share gone; the route comes out with only the weights (and graystack's rules) changed."""

from __future__ import annotations

import asyncio
import copy

import pytest
import yaml

from gateway.app import GatewayProcess
from gateway.kubernetes.process import KubernetesOptions, gateway_options, kubernetes_gateway
from graystack.local.processes import free_port
from tests.integration.test_kubernetes_mode import eventually, operate
from tests.support.gateway_api_stand import HEADER, NAMESPACE, SERVICE_ROUTE, Stand, Traffic, gateway_api
from tests.unit.test_gatewayapi_routes import without_ours

pytestmark = pytest.mark.integration

SPEC_CM, STATE_CM, LEASE, POD = "gs-spec", "gs-rollout-state", "gs-gateway-leader", "gateway-a"
SPEC = {
    "name": "llm",
    "variants": {
        "stable": {"service": "llm-v1", "port": 8000},
        "canary": {"service": "llm-v2", "port": 8000},
    },
    "routing": {
        "header": HEADER,
        "weights": {"stable": 100, "canary": 0},
        "rules": [{"value": "beta", "weights": {"stable": 50, "canary": 50}}],
    },
    "retries": {"fallback": "stable"},
    "strategy": {
        "shadow": {"percent": 50, "duration": "1h"},
        "steps": [{"weight": 5, "hold": "2s"}, {"weight": 20, "hold": "2s"}, {"weight": 100}],
    },
    "analysis": {
        "interval": "0.5s",
        "min_detectable_error_rate": 0.1,
        "max_latency_ratio": None,
        "max_ttft_p95": None,
        "expected_weight_status": None,
    },
    "gateway_api": gateway_api("llm"),
}


@pytest.fixture
def stand(envoy_binary, tmp_path):
    running = Stand(envoy_binary, tmp_path / "stand", free_port()).start()
    try:
        running.install(SERVICE_ROUTE)
        for name, data in ((SPEC_CM, {"spec.yaml": yaml.safe_dump(SPEC)}), (STATE_CM, None)):
            running.api.put(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE}}
                | ({"data": data} if data else {})
            )
        running.api.put(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NAMESPACE}}
        )
        yield running
    finally:
        running.stop()
        assert running.gateway is None or running.gateway.envoy is None or not running.gateway.envoy.alive()


async def graystack(stand: Stand, tmp_path) -> GatewayProcess:
    """The kube-gateway replica, its xDS port (the access log's) where the gateway's log goes."""
    kube = KubernetesOptions(
        NAMESPACE,
        SPEC_CM,
        STATE_CM,
        LEASE,
        POD,
        pod=POD,
        kubeconfig=str(stand.api.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)),
        lease_seconds=2.0,
    )
    gateway = kubernetes_gateway(gateway_options(kube, xds_port=stand.als_port, admin_port=free_port()), kube)
    await gateway.start()
    await eventually(lambda: gateway.driver.sources.elector.leading, 10, "the replica to lead")
    return gateway


def weights(stand: Stand) -> list[list[int]]:
    route = stand.api.get("HTTPRoute", NAMESPACE, "llm")
    return [[ref.get("weight", 1) for ref in rule["backendRefs"]] for rule in route["spec"]["rules"]]


def held_for_proof(stand: Stand) -> list[str]:
    return [
        e["message"]
        for e in stand.api.list("Event", NAMESPACE)
        if e["reason"] == "Holding" and "proven served" in e["message"]
    ]


async def test_a_rollout_on_the_users_gateway_steps_on_proof_resumes_and_rolls_back_on_it(stand, tmp_path):
    canary_hits = sum(u.hits for u in stand.upstreams.values() if u.name == "llm-v2")
    gateway = await graystack(stand, tmp_path)
    traffic = Traffic(stand.url, segment_every=5).start()
    try:
        await eventually(lambda: gateway.controller.state.label() == "shadow", 10, "the shadow stage")
        mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": {"group": "", "kind": "Service", "name": "llm-v2", "port": 8000}, "percent": 50}}  # fmt: skip
        await eventually(
            lambda: mirror in stand.api.get("HTTPRoute", NAMESPACE, "llm")["spec"]["rules"][0]["filters"],
            10,
            "the RequestMirror filter in the user's rule",
        )
        await eventually(
            lambda: sum(u.hits for u in stand.upstreams.values() if u.name == "llm-v2") > canary_hits + 100,
            20,
            "copies at the canary's servers",
        )
        await operate(gateway, "promote")  # the copies' answers reach no access log: nothing to judge
        await eventually(lambda: gateway.controller.state.label() == "step 0", 10, "step 0")
        await eventually(lambda: weights(stand)[0] == [95, 5], 5, "5 % written")

        generation = stand.api.get("HTTPRoute", NAMESPACE, "llm")["metadata"]["generation"]
        await gateway.stop()  # a restart mid-rollout
        gateway = await graystack(stand, tmp_path)
        assert gateway.controller.state.label() == "step 0"
        await asyncio.sleep(1.0)
        assert stand.api.get("HTTPRoute", NAMESPACE, "llm")["metadata"]["generation"] == generation

        await eventually(lambda: gateway.controller.state.label() == "promoted", 120, "the promotion")
        await eventually(lambda: weights(stand)[0] == [0, 100], 5, "100 % written")
        assert held_for_proof(stand), "no step was taken before its split was proven served"

        stand.fail("llm-v2", 500)
        await eventually(lambda: gateway.controller.state.label() == "rolled_back", 30, "the rollback")
        await eventually(lambda: weights(stand)[0] == [100, 0], 5, "the rollback written")
        assert weights(stand)[2] == [100, 0]  # the segment's rule too
        assert gateway.controller.status().rollback_in_flight  # until the answers show it
        await eventually(
            lambda: not gateway.controller.status().rollback_in_flight, 60, "the rollback proven"
        )
        assert gateway.controller.status().last_rollback_seconds > 0
    finally:
        await traffic.stop()
        stand.fail("llm-v2", 200)
        await gateway.stop()

    route = stand.api.get("HTTPRoute", NAMESPACE, "llm")
    applied = copy.deepcopy(stand.installed["llm"])
    assert without_ours(route)["spec"] == without_ours(applied)["spec"]
    assert route["metadata"]["annotations"] == applied["metadata"]["annotations"]
