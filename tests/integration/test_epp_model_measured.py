"""A model variant measured as its own through the picker inside the gateway process (issue 37, item 3):
`graystack kube-gateway` serving the InferencePool's picker behind a GIE gateway's data plane on the real
Envoy 1.40 (tests/support/epp_world.py), the canary a model name on the stable pods. Each answer reaches
the gateway by its own access log, served by a stable pod; it counts as the canary's where the picker
marked its request so (x-graystack-routed), whatever mark the client sent. Beside it, what users see of
the picker: its counters on the gateway's /metrics, and in status a pod whose metrics hang.

And the model variant rolled out (issue 37, "What to show"): each cohort sees one model, across looks and
across a step (20 → 50 %); a fault that only the canary's model suffers on the shared pods is measured from
the gateway's access log as the canary's and rolled back by the guard; then every request reaches the pods
with the model its client sent (the picker no longer rewrites)."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import families, names
from gateway.admin.protocol import Status
from gateway.app import GatewayProcess
from graystack.console.status_view import render_status
from tests.integration.test_kubernetes_mode import admin_call, eventually, operate
from tests.support.epp_world import PODS, TRACK, picker_world, rollout_spec
from tests.support.gateway_api_stand import Traffic
from tests.support.named_upstreams import MODEL_HEADER, NAME_HEADER

pytestmark = pytest.mark.integration

BASE, LORA = "llama-3", "llama-3-lora-v2"
# v2-a (track v2) is labelled as no variant is (the canary has no pods of its own): it must get nothing
SPEC = rollout_spec(values={"stable": "v1"}, models={"canary": LORA})
# a step between: the fault comes at 50 %, where the baseline's own answers on the same pods are compared
STEPPED = SPEC | {"strategy": {"steps": [{"weight": weight, "hold": "1h"} for weight in (20, 50, 100)]}}


async def counts(gateway: GatewayProcess) -> dict[str, float]:
    """The picker's counters, read from the gateway's /metrics."""
    page = (await admin_call(gateway, "GET", "/metrics")).text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }

    def counted(family: str, **labels: str) -> float:
        return samples.get((family, tuple(sorted(labels.items()))), 0.0)

    return {
        "picks canary": counted(families.EPP_PICKS, variant="canary"),
        "picks stable": counted(families.EPP_PICKS, variant="stable"),
        "canary unchanged: not JSON": counted(families.EPP_UNCHANGED, variant="canary", reason="not JSON"),
        "unread: not JSON": counted(families.EPP_UNREAD, reason="not JSON"),
        "pods scored by fallback": counted(families.EPP_FALLBACK_SCORES),
    }


async def test_a_model_variants_answers_are_its_own_and_the_picker_says_what_it_did(envoy_binary, tmp_path):
    async with picker_world(envoy_binary, tmp_path, SPEC, PODS) as world:
        gateway, pods = world.gateway, world.upstreams
        # v1-b's metrics hang: status names it as ranked by in-flight counts, v1-a (read) not
        pods["v1-b"].metrics_delay = 5.0
        hung = f"{PODS['v1-b'][0]}:{pods['v1-b'].port}"

        async def listed() -> Status | None:
            status = Status.model_validate((await admin_call(gateway, "GET", "/v1/status")).json())
            fallbacks = status.picker.fallbacks if status.picker is not None else {}
            return status if list(fallbacks) == [hung] and "TimeoutError" in fallbacks[hung] else None

        status = await eventually(listed, 10, "v1-b, and it alone, listed as on fallback")
        assert status.picker is not None
        assert (status.picker.pool, status.picker.ready) == ("serving/llm", True)
        [line] = [line for line in render_status(status).splitlines() if "FALLBACK" in line]
        assert (
            line
            == f"  FALLBACK {hung} ranked by its requests in flight alone: {status.picker.fallbacks[hung]}"
        )

        before = await counts(gateway)
        models: dict[str, str] = {}  # each user's model: their cohort's variant
        async with httpx.AsyncClient(base_url=world.plane.url, timeout=10) as client:
            for n in range(100):
                # a client that tries to choose the variant its answer counts as, by sending the mark
                sent = {names.ROUTED_HEADER: ("canary", "stable")[n % 2], "x-user": f"user-{n}"}
                answer = await client.post(
                    "/v1/completions", json={"model": BASE, "prompt": "hi"}, headers=sent
                )
                assert (answer.status_code, TRACK[answer.headers[NAME_HEADER]]) == (200, "v1"), answer.text
                models[f"user-{n}"] = answer.headers[MODEL_HEADER]
            by_model = Counter(models.values())
            assert abs(by_model[LORA] - 20) <= 4 * 4, by_model  # step 0: 20 % of 100 (sigma 4)
            # bodies that cannot be rewritten, five from each variant's users, marked canary by the client:
            # served, and counted, as the baseline's
            users = [
                user for model in (LORA, BASE) for user in [u for u, m in models.items() if m == model][:5]
            ]
            for user in users:
                sent = {names.ROUTED_HEADER: "canary", "x-user": user}
                answer = await client.post("/v1/completions", content=b"not json", headers=sent)
                assert (answer.status_code, answer.headers[MODEL_HEADER]) == (200, "")
        await eventually(lambda: gateway.answers.routed == 110, 10, "every answer in the gateway's log")
        answered = gateway.answers.answered
        assert (answered["canary"], answered["stable"]) == (by_model[LORA], by_model[BASE] + 10)
        assert pods["v2-a"].hits == 0

        moved = {name: n - before[name] for name, n in (await counts(gateway)).items()}
        assert moved == {
            "picks canary": by_model[LORA],
            "picks stable": by_model[BASE] + 10,
            "canary unchanged: not JSON": 5,
            "unread: not JSON": 10,  # the `prefix` scorer reads bodies
            "pods scored by fallback": moved["pods scored by fallback"],
        }
        assert moved["pods scored by fallback"] >= 110  # v1-b, at every pick


async def test_a_model_variant_keeps_cohorts_on_one_model_and_a_fault_of_its_own_is_rolled_back(
    envoy_binary, tmp_path
):
    async with picker_world(envoy_binary, tmp_path, STEPPED, PODS) as world:
        gateway, pods = world.gateway, world.upstreams
        users = [f"user-{n}" for n in range(40)]
        async with httpx.AsyncClient(base_url=world.plane.url, timeout=10) as client:

            async def models() -> dict[str, str]:
                """Each user's model, at one request each: the `model` their request reached a pod with."""
                seen: dict[str, str] = {}
                for user in users:
                    sent = {"model": BASE, "prompt": "hi"}
                    answer = await client.post("/v1/completions", json=sent, headers={"x-user": user})
                    served = (answer.status_code, TRACK[answer.headers[NAME_HEADER]])
                    assert served == (200, "v1"), answer.text
                    seen[user] = answer.headers[MODEL_HEADER]
                return seen

            at_20 = await models()
            # both models seen (none of 40 users on the canary at 20 %: 0.8^40, about 1e-4)
            assert set(at_20.values()) == {BASE, LORA}, at_20
            assert await models() == at_20  # another look: each cohort on its model
            await operate(gateway, "promote")
            await eventually(lambda: gateway.controller.state.label() == "step 1", 10, "step 1: 50 %")
            at_50 = await models()
            # the step moves only cohorts at its edge: those on the canary stay on it
            assert {at_50[user] for user, model in at_20.items() if model == LORA} == {LORA}, at_50
            assert await models() == at_50

            for upstream in pods.values():
                upstream.failing_models = {LORA}  # the adapter breaks; the baseline's model still serves
            traffic = Traffic(world.plane.url, path="/v1/completions").start()  # its body's model: "llm"
            try:
                await eventually(lambda: gateway.controller.state.label() == "rolled_back", 30, "rollback")
            finally:
                await traffic.stop()
            reason = gateway.controller.state.reason
            # the guard's error test, the errors shown the canary's by comparison with the baseline's
            assert "error_rate fail" in reason, reason
            assert "above the baseline's" in reason, reason
            assert gateway.answers.failed["canary"] > 0
            assert gateway.answers.failed["stable"] == 0
            assert set((await models()).values()) == {BASE}  # the very next requests: no rewrite
        assert pods["v2-a"].hits == 0
