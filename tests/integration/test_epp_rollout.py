"""The picker inside the gateway process (issue 37): `graystack kube-gateway` with the spec's
`endpoint_picker` serves a GIE Endpoint Picker for an InferencePool (in-process, against the API stand-in:
no real API server runs here), fed the live spec at every pick, behind a GIE gateway's data plane on the
real Envoy 1.40 (tests/support/gie_data_plane.py, the stand-in for Istio's or Envoy Gateway's:
override_host). The pool's pods are small servers on loopback addresses of their own, labelled by track
(`v1`, `v2`), the variants named otherwise (`stable`, `canary`).

What it shows: the pool's pods are read from the API; the step's split is the split served; a cohort
stays on one variant; an operator's promote and rollback reach the very next requests (no route to
reconcile); a pod that stops being ready takes no more requests; a body that is not JSON or has no `model`
is routed and answered like any other; the answers come from the gateway's own access log, placed by the
pod that served each, and a fault on the canary's pod is rolled back by the guard, the next requests all on
the baseline's pods."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from gateway.app import GatewayProcess
from gateway.kubernetes.api import api_client
from gateway.kubernetes.pool import PickerOptions, PoolPicker
from gateway.spec.model import validate_spec
from tests.integration.test_kubernetes_mode import eventually, operate
from tests.support.epp_world import NS, PODS, TRACK, inference_pool, picker_world, pod, rollout_spec
from tests.support.gateway_api_stand import Traffic
from tests.support.gie_data_plane import DataPlane
from tests.support.kube_api import FakeApiServer
from tests.support.named_upstreams import NAME_HEADER

pytestmark = pytest.mark.integration

SPEC = rollout_spec(values={"stable": "v1", "canary": "v2"})


@pytest.fixture
async def world(envoy_binary, tmp_path):
    async with picker_world(envoy_binary, tmp_path, SPEC, PODS) as world:
        yield world.api, world.gateway, world.plane, world.upstreams


async def served(plane: DataPlane, n: int, user: str | None = None) -> Counter[str]:
    """The tracks that answered `n` requests."""
    tracks: Counter[str] = Counter()
    async with httpx.AsyncClient(base_url=plane.url, timeout=10) as client:
        for _ in range(n):
            answer = await client.post(
                "/v1/completions", json={"prompt": "hi"}, headers={"x-user": user} if user else {}
            )
            assert answer.status_code == 200, answer.text
            tracks[TRACK[answer.headers[NAME_HEADER]]] += 1
    return tracks


async def test_the_picker_in_the_gateway_serves_each_step_at_once_and_keeps_cohorts(world):
    api, gateway, plane, upstreams = world
    gateway_process: GatewayProcess = gateway
    tracks = await served(plane, 300)
    assert abs(tracks["v2"] - 60) <= 4 * 7, tracks  # 20 % of 300 (sigma ~7)
    users = {f"user-{i}": (await served(plane, 1, f"user-{i}")).most_common(1)[0][0] for i in range(30)}
    assert set(users.values()) == {"v1", "v2"}
    for user, track in list(users.items())[:10]:
        assert await served(plane, 3, user) == {track: 3}  # a cohort stays on its variant

    await operate(gateway_process, "promote")  # step 1: 100 %
    assert await served(plane, 20) == {"v2": 20}  # the very next requests
    await operate(gateway_process, "rollback")
    assert await served(plane, 20) == {"v1": 20}

    api.put(pod("v1-b", PODS["v1-b"][0], "v1", ready=False))  # a pod stops being ready
    await eventually(lambda: len(gateway_process.driver.pool.pods["stable"]) == 1, 10, "the pod dropped")
    dropped = upstreams["v1-b"].hits
    assert await served(plane, 20) == {"v1": 20}
    assert upstreams["v1-b"].hits == dropped  # every one to the pod still ready

    # Bodies that are not JSON or have no `model`: routed like any other, never refused, and each one an
    # answer in the gateway's answer log (its access log), placed on the variant whose pod served it.
    sent = 300 + 30 + 30 + 20 + 20 + 20
    try:
        await eventually(lambda: gateway_process.answers.routed == sent, 10, "every answer so far in the log")
    except AssertionError as error:  # say how many came: fewer (lost) or more (counted twice)
        raise AssertionError(f"{error}: {gateway_process.answers.routed} of {sent}") from None
    stable = gateway_process.answers.answered["stable"]
    async with httpx.AsyncClient(base_url=plane.url, timeout=10) as client:
        for body in (b"not json", bytes(range(256)), b'{"prompt": "no model"}', b""):
            answer = await client.post("/v1/completions", content=body)
            assert (answer.status_code, TRACK[answer.headers[NAME_HEADER]]) == (200, "v1"), answer.text
    await eventually(lambda: gateway_process.answers.routed == sent + 4, 10, "their answers in the log")
    assert gateway_process.answers.answered["stable"] == stable + 4
    assert gateway_process.answers.failed["stable"] == 0


async def test_a_fault_on_the_canarys_pods_is_measured_from_the_gateways_log_and_rolled_back_at_once(world):
    _, gateway, plane, upstreams = world
    traffic = Traffic(plane.url, path="/v1/completions").start()
    try:
        await eventually(lambda: gateway.answers.answered["canary"] > 50, 20, "the canary's answers measured")
        upstreams["v2-a"].status = 500  # the canary's one pod breaks
        await eventually(lambda: gateway.controller.state.label() == "rolled_back", 30, "the rollback")
    finally:
        await traffic.stop()
    assert gateway.answers.failed["canary"] > 0
    assert gateway.answers.failed["stable"] == 0
    assert await served(plane, 20) == {"v1": 20}  # the very next requests: no route to reconcile
    assert not gateway.controller.status().rollback_in_flight


def test_a_pool_whose_selector_matches_no_pod_is_named_and_the_picker_not_ready(tmp_path, caplog):
    api = FakeApiServer().start()
    try:
        api.put(pod("v1-a", "127.0.8.1", "v9"))  # a pod, but of no variant's track
        api.put(inference_pool(8000))
        live = validate_spec(SPEC)
        picker = PoolPicker(
            api_client(str(api.write_kubeconfig(tmp_path / "kubeconfig", NS))), lambda: live, PickerOptions()
        )
        picker.read()
        assert not picker.ready()
        assert picker.problem == (
            "InferencePool serving/llm: no Running, Ready pod matches its selector with one of track=v1, track=v2"
        )
        assert picker.problem in caplog.text
    finally:
        api.stop()
