"""Answer quality judged at the gateway in front of servers nobody here wrote (issue 28): llama.cpp on the
tiny model made locally, the real Envoy, the real gateway (in this process, `direct` provider).

- Two llama.cpp servers on the same model: the shadow stage passes on every comparator (greedy
  agreement on the gateway's pairs, structure, a judge) and the rollout moves to its first live step.
- The candidate another checkpoint of the same architecture (the weights perturbed: every greedy answer
  differs): the shadow stage never moves to a live step; the rollout is rolled back by
  `shadow_agreement` before any client saw a candidate answer.
- A candidate behind a proxy that cuts its answers in half: its JSON-mode answers stop parsing (status
  200 all the same), and `structure` rolls it back from a live 5 % stage.
The judge is a deterministic one served here (TIE for equal answers): its protocol against llama.cpp is
in test_judge_llama_cpp.py. Nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import REGISTRY

from tests.support.measured import Measured, measured_gateway
from tests.support.third_party.models import MODEL_NAME, tiny_model
from tests.support.third_party.servers import ThirdPartyServer, start_llama_cpp
from tests.support.threaded_server import served
from tests.support.truncating_proxy import truncating_proxy
from tests.unit.test_judge import judge_app

pytestmark = pytest.mark.integration

ANALYSIS = {
    "interval": "1s",
    "expected_weight_status": None,
    "max_latency_ratio": None,  # about answers, not speed: two servers on one thread each
    "min_detectable_error_rate": 0.2,  # a stage needs 25 candidate requests, not 3,068
}
SHADOW = {"duration": "2s", "gate": {"max_latency_ratio": 3.0}}
STEPS = [{"weight": 5, "hold": "1h"}, {"weight": 100}]


@pytest.fixture(scope="module")
def servers(tiny_llama, tmp_path_factory) -> Iterator[dict[str, ThirdPartyServer]]:
    """A second llama.cpp on the same model (the session's `llama_cpp` is the first), and one on the
    perturbed checkpoint."""
    started = {
        "twin": start_llama_cpp(tiny_llama, tmp_path_factory.mktemp("twin")),
        "perturbed": start_llama_cpp(tiny_model(perturbed=0.5), tmp_path_factory.mktemp("perturbed")),
    }
    try:
        yield started
    finally:
        for server in started.values():
            server.stop()
            assert not server.process.alive(), f"{server.name} (pid {server.process.pid}) left running"


def chat(i: int, json_mode: bool) -> dict:
    body = {
        "model": MODEL_NAME,
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": f"question {i} about the gateway"}],
    }
    return body | ({"response_format": {"type": "json_object"}} if json_mode else {})


async def traffic(measured: Measured, seen: Counter, json_share: int = 4, workers: int = 4) -> None:
    """Greedy chat requests, every `json_share`-th in JSON mode, counting who answered each (the
    x-graystack-variant header: what a client saw)."""

    async def one(worker: int) -> None:
        async with httpx.AsyncClient(base_url=measured.url, timeout=30) as client:
            i = worker
            while True:
                i += workers
                with contextlib.suppress(httpx.HTTPError):
                    answer = await client.post("/v1/chat/completions", json=chat(i % 50, i % json_share == 0))
                    seen[answer.status_code, answer.headers.get("x-graystack-variant", "-")] += 1

    await asyncio.gather(*(one(w) for w in range(workers)))


async def rollout_until(measured: Measured, done, within: float = 120.0) -> dict:
    """The rollout section of status once `done(it)` holds (fails with the last one after `within` s)."""
    admin = f"http://127.0.0.1:{measured.gateway.options.admin_port}"
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            state = (await client.get(f"{admin}/v1/status")).json()["rollout"]
            if done(state) or time.monotonic() > deadline:
                checks = [
                    (c["name"], c["verdict"], c["reason"])
                    for c in (state["last_decision"] or {}).get("checks", [])
                ]
                assert done(state), f"{state['phase']}: {state['reason']}; {checks}"
                return state
            await asyncio.sleep(0.5)


async def under_traffic(measured: Measured, done) -> tuple[dict, Counter]:
    seen: Counter = Counter()
    task = asyncio.create_task(traffic(measured, seen))
    try:
        return await rollout_until(measured, done), seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def passes(check: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "graystack_analysis_checks_total", {"rollout": "answers", "check": check, "result": "pass"}
        )
        or 0.0
    )


async def test_identical_servers_pass_the_shadow_stage_on_every_comparator(
    tmp_path, envoy_binary, llama_cpp, servers
):
    with served(judge_app({"mode": "fair"}), "the judge") as judge:
        quality = {
            "max_greedy_disagreement": 0.05,
            "structure": True,
            "judge": {"url": f"http://127.0.0.1:{judge}/v1", "model": "judge", "budget_per_hour": 100_000},
        }
        rollout = {
            "strategy": {"shadow": SHADOW, "steps": STEPS},
            "analysis": {**ANALYSIS, "quality": quality},
        }
        variants = {"baseline": llama_cpp.port, "tuned": servers["twin"].port}
        before = {check: passes(check) for check in ("shadow_agreement", "structure", "judge")}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, rollout) as measured:
            state, _ = await under_traffic(measured, lambda r: r["phase"] != "shadow")
    assert (state["phase"], state["step"]) == ("progressing", 0), state["reason"]
    for check, count in before.items():
        assert passes(check) > count, f"{check} never passed"


async def test_a_perturbed_candidate_never_leaves_the_shadow_stage(
    tmp_path, envoy_binary, llama_cpp, servers
):
    quality = {"max_greedy_disagreement": 0.05, "structure": True}
    rollout = {"strategy": {"shadow": SHADOW, "steps": STEPS}, "analysis": {**ANALYSIS, "quality": quality}}
    variants = {"baseline": llama_cpp.port, "tuned": servers["perturbed"].port}
    async with measured_gateway(tmp_path, envoy_binary, variants, {}, rollout) as measured:
        state, seen = await under_traffic(measured, lambda r: r["phase"] != "shadow")
    assert state["phase"] == "rolled_back", state["reason"]
    assert "shadow_agreement" in state["reason"], state["reason"]
    assert {variant for (_, variant) in seen} == {"baseline"}  # no client saw a candidate answer


async def test_json_answers_that_stop_parsing_are_rolled_back_from_a_live_stage(
    tmp_path, envoy_binary, llama_cpp
):
    quality = {"capture_percent": 100, "structure": True}
    rollout = {"strategy": {"steps": STEPS}, "analysis": {**ANALYSIS, "quality": quality}}
    with truncating_proxy(llama_cpp.url) as cut:
        variants = {"baseline": llama_cpp.port, "tuned": cut}
        async with measured_gateway(tmp_path, envoy_binary, variants, {}, rollout) as measured:
            state, seen = await under_traffic(measured, lambda r: r["phase"] == "rolled_back")
    assert "structure" in state["reason"], state["reason"]
    assert seen[200, "tuned"] > 0
    assert not [key for key in seen if key[0] != 200]  # every answer was a 200: no error test could see it
