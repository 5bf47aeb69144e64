"""A model variant measured as its own through the picker inside the gateway process (issue 37, item 3):
`graystack kube-gateway` serving the InferencePool's picker behind a GIE gateway's data plane on the real
Envoy 1.40 (tests/support/epp_world.py), the canary a model name on the stable pods. Each answer reaches
the gateway by its own access log, served by a stable pod; it counts as the canary's where the picker
marked its request so (x-graystack-routed), whatever mark the client sent. Beside it, what users see of
the picker: its counters on the gateway's /metrics, and in status a pod whose metrics hang."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import families, names
from gateway.admin.protocol import Status
from gateway.app import GatewayProcess
from graystack.console.status_view import render_status
from tests.integration.test_kubernetes_mode import admin_call, eventually
from tests.support.epp_world import PODS, TRACK, picker_world, rollout_spec
from tests.support.named_upstreams import MODEL_HEADER, NAME_HEADER

pytestmark = pytest.mark.integration

BASE, LORA = "llama-3", "llama-3-lora-v2"
# v2-a (track v2) is labelled as no variant is (the canary has no pods of its own): it must get nothing
SPEC = rollout_spec(values={"stable": "v1"}, models={"canary": LORA})


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
