"""Where no access log of the user's gateway can reach graystack (a gateway that is not Envoy-based), the
split is proven from the model servers' own request counters (gateway_api.server_counters,
gateway/gatewayapi/server_counts.py): the reference gateway (tests/support/reference_gateway.py, a real
Envoy) here sends no access log, and each upstream exports the count of what it took, as a model server
does."""

from __future__ import annotations

import pytest

from gateway.rollout.rollout_state import DATA_PLANE
from graystack.local.processes import free_port
from tests.support.gateway_api_graystack import Graystack, spec
from tests.support.gateway_api_stand import NAMESPACE, SERVICE_ROUTE, Stand, Traffic, gateway_api
from tests.support.named_upstreams import COUNTER
from tests.support.reference_translation import Bug

pytestmark = pytest.mark.integration

COUNTED = gateway_api("llm", server_counters={"counter": COUNTER})


@pytest.fixture(scope="module")
def stand(envoy_binary, tmp_path_factory):
    running = Stand(envoy_binary, tmp_path_factory.mktemp("counters"), free_port(), access_log=False)
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.mark.parametrize(("bug", "proven"), [(Bug.NONE, True), (Bug.FIRST_BACKEND_ONLY, False)])
async def test_the_servers_own_counters_prove_or_refute_the_split(stand, tmp_path, bug, proven):
    assert stand.gateway is not None
    stand.gateway.bug = Bug.NONE
    stand.install(SERVICE_ROUTE)
    stand.gateway.bug = bug
    kubeconfig = str(stand.api.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE))
    try:
        async with Graystack(stand, spec(COUNTED, {"stable": 95, "canary": 5}), kubeconfig) as graystack:
            traffic = Traffic(stand.url).start()
            try:
                gate = await graystack.until(lambda g: g.proven or g.refuted, 60)
            finally:
                await traffic.stop()
    finally:
        stand.gateway.bug = Bug.NONE
    assert graystack.store.counts.kept == 0  # no access log: no answer reached graystack
    assert gate.proven is proven, gate.reason
    if not proven:
        assert gate.waiting_on == DATA_PLANE
        assert gate.reason.startswith("canary: 5% asked, 0 of ")
