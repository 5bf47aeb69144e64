"""GIE's conformance scenario `GatewayWeightedAcrossTwoInferencePools`, ported
(tests/conformance/inference-extension/: its manifest, vendored; the Go test it comes from reads as its
specification): a route over two InferencePools of three pods each, traffic through the gateway, each
answer attributed to a pool by the pod that served it. The Go test sends 200 requests and allows ±10
points (or 4.5 sigma); here graystack writes the pools' weights and its sequential split test
(gateway/rollout/sequential/split.py) must show the asked split served, at 1 %, 5 % and 50 %, through
the reference gateway on a real Envoy (tests/support/reference_gateway.py, the stand-in for the
conformant gateways: no real one runs here). And where a gateway serves a two-pool rule from one pool
(istio#61594), GIE's own tolerance passes the 5 % case on its 200 requests while graystack refutes it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from graystack.local.processes import free_port
from tests.support.gateway_api_graystack import Graystack, spec
from tests.support.gateway_api_stand import Stand, Traffic
from tests.support.gie_tolerance import gie_passes
from tests.support.reference_translation import Bug

pytestmark = pytest.mark.integration

MANIFEST = Path(__file__).parents[1] / "conformance/inference-extension/gateway_weighted_two_pools.yaml"
ROUTE = yaml.safe_load(MANIFEST.read_text())
NAMESPACE = ROUTE["metadata"]["namespace"]
PARENT = ROUTE["spec"]["parentRefs"][0]
PATH = ROUTE["spec"]["rules"][0]["matches"][0]["path"]["value"]
POOLS = {  # base.yaml's three replicas each, here each pod on a loopback address of its own
    "primary-inference-pool": ("127.0.1.1", "127.0.1.2", "127.0.1.3"),
    "secondary-inference-pool": ("127.0.1.4", "127.0.1.5", "127.0.1.6"),
}
VARIANTS = ("primary", "secondary")
GATEWAY_API = {
    "routes": [{"name": ROUTE["metadata"]["name"], "namespace": NAMESPACE}],
    "backends": {v: {"kind": "InferencePool", "name": f"{v}-inference-pool"} for v in VARIANTS},
}


@pytest.fixture(scope="module")
def stand(envoy_binary, tmp_path_factory):
    running = Stand(
        envoy_binary,
        tmp_path_factory.mktemp("gie-conformance"),
        free_port(),
        namespace=NAMESPACE,
        parent=(PARENT["namespace"], PARENT["name"]),
        services={},
        pools=POOLS,
    )
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture
def world(stand, tmp_path):
    assert stand.gateway is not None
    stand.gateway.bug = Bug.NONE
    stand.install(ROUTE)  # 70/30 as the manifest has it, Accepted
    yield stand, str(stand.api.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE))
    stand.gateway.bug = Bug.NONE


@pytest.mark.parametrize("asked", [1, 5, 50])
async def test_the_asked_split_across_two_pools_is_shown_served(world, asked):
    stand, kubeconfig = world
    live = spec(GATEWAY_API, {"primary": 100 - asked, "secondary": asked}, variants=VARIANTS)
    async with Graystack(stand, live, kubeconfig) as graystack:
        traffic = Traffic(stand.url, path=PATH).start()
        try:
            gate = await graystack.until(lambda g: g.proven or g.refuted, 180)
        finally:
            await traffic.stop()
    assert gate.proven, gate.reason
    route = stand.api.get("HTTPRoute", NAMESPACE, ROUTE["metadata"]["name"])
    assert [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]] == [100 - asked, asked]
    served = Counter(a.server for a in graystack.store.since(0).answers)
    assert set(served) <= set(VARIANTS)  # every answer from a pod of one of the two pools


async def test_a_two_pool_rule_served_by_one_pool_passes_gies_tolerance_and_is_refuted(world):
    stand, kubeconfig = world
    stand.gateway.bug = Bug.ONE_POOL_FOR_RULE
    live = spec(GATEWAY_API, {"primary": 95, "secondary": 5}, variants=VARIANTS)
    async with Graystack(stand, live, kubeconfig) as graystack:
        traffic = Traffic(stand.url, path=PATH).start()
        try:
            gate = await graystack.until(lambda g: g.proven or g.refuted, 60)
        finally:
            await traffic.stop()
    assert gate.refuted
    assert gate.reason.startswith("secondary: 5% asked, 0 of ")
    last = [a.server for a in graystack.store.since(0).answers][-200:]  # GIE's sample: 200 requests
    assert len(last) == 200
    assert gie_passes(last.count("secondary"), 200, 0.05)  # 0 of 200 is within its 10 points of 5 %
