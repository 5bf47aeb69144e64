"""Several candidates in one rollout on the real stack (issue 38): the real `graystack gateway` (`direct`
provider, a look a second), the real Envoy, and three stand-in pods (tests/support/named_upstreams.py),
each named otherwise than its variant. Keyed clients (sticky cohorts) send steady requests while one
candidate's pod starts failing every request: that candidate's lane alone is rolled back, its share and
its clients return to the baseline, and the other candidate keeps its share and every one of its clients,
none of whom ever sees an error (the failed attempts retry on the baseline). Nothing here asserts a
duration."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from graystack.local.gateway_stack import INFERENCE_PATH, GatewayStack, default_spec, measuring_args
from graystack.local.processes import ManagedProcess, free_port, wait_until
from tests.support.named_upstreams import NAME_HEADER, NamedUpstream, serving
from tests.support.stacks import gateway_metric, running

pytestmark = pytest.mark.integration

PODS = {"control": "pod-1", "tune-a": "pod-2", "tune-b": "pod-3"}  # variant -> the pod's own name
REGULARS = [f"user-{i}" for i in range(200)]  # clients that come back: their pods show the cohorts


class ThreePods:
    """The stack's upstreams: a pod per variant (started by the `pods` fixture); the guard measures
    Envoy's counters (`--envoy-admin`), as `graystack up` has it."""

    port_names = ()

    def __init__(self, pods: Mapping[str, NamedUpstream]) -> None:
        self.pods = pods

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        spec = default_spec(0, 0)
        by_variant = {variant: self.pods[pod] for variant, pod in PODS.items()}
        spec["name"] = "tunes"
        spec["variants"] = {v: {"endpoints": [f"{p.host}:{p.port}"]} for v, p in by_variant.items()}
        spec["routing"] = {"weights": {"control": 100}, "affinity": [{"header": "x-user-id"}]}
        spec["retries"]["fallback"] = "control"
        spec["health_check"] = None  # a failing pod keeps its requests: the guard, not Envoy, judges it
        spec["outlier_detection"] = None
        spec["strategy"] = {"steps": [{"weight": 10, "hold": "1h"}, {"weight": 30}]}
        spec["analysis"] = {
            "interval": "1s",
            "max_latency_ratio": None,
            "max_ttft_p95": None,
            "expected_weight_status": None,
        }
        return spec

    def gateway_args(self, envoy_admin: str) -> list[str]:
        return measuring_args(envoy_admin, [])

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        return {}

    def processes(self) -> list[ManagedProcess]:
        return []  # threads of this process, stopped by `serving`


@pytest.fixture
def pods() -> Iterator[dict[str, NamedUpstream]]:
    port = free_port()
    yield from serving({PODS[variant]: f"127.0.0.{2 + i}" for i, variant in enumerate(PODS)}, port)


@pytest.fixture
def stack(pods, tmp_path, envoy_binary) -> Iterator[GatewayStack]:
    yield from running(GatewayStack(tmp_path, envoy_binary, upstreams=ThreePods(pods)))


class KeyedClients:
    """Requests one after another, half from `REGULARS` and half from new clients (the tests count a client
    once per stage, gateway/metrics/client_units.py: a regression that starts mid-stage is seen in the
    clients new to it), each answer recorded in order with the client's key."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=15.0)
        self.answers: list[tuple[str, int, str]] = []  # (key, status, the pod that answered)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KeyedClients:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(20)
        self.client.close()

    def _run(self) -> None:
        draw = random.Random(7)
        while not self.stopped.wait(0.01):
            key = draw.choice(REGULARS) if draw.random() < 0.5 else f"new-{len(self.answers)}"
            response = self.client.post(INFERENCE_PATH, json={"model": "m"}, headers={"x-user-id": key})
            self.answers.append((key, response.status_code, response.headers.get(NAME_HEADER, "")))

    def pods_by_key(self, since: int = 0, until: int | None = None) -> dict[str, set[str]]:
        served: dict[str, set[str]] = defaultdict(set)
        for key, _, pod in self.answers[since:until]:
            if key in REGULARS:
                served[key].add(pod)
        return served


def lanes(stack: GatewayStack) -> dict[str, dict[str, Any]]:
    return {lane["candidate"]: lane for lane in stack.status()["rollout"]["candidates"]}


def test_a_failing_candidate_is_rolled_back_alone_and_the_others_clients_keep_their_pod(stack, pods):
    assert {c: (lane["phase"], lane["weight"]) for c, lane in lanes(stack).items()} == {
        "tune-a": ("progressing", 10),
        "tune-b": ("progressing", 10),
    }
    with KeyedClients(stack.client.base_url) as clients:
        wait_until(lambda: len(clients.answers) > 600, 60, "answers to most keys on the healthy split")
        before = len(clients.answers)
        pods[PODS["tune-a"]].status = 500  # every request on tune-a's pod fails from now on
        try:
            rolled = wait_until(
                lambda: (
                    (lane := lanes(stack)["tune-a"])["phase"] == "rolled_back"
                    and not lane["rollback_in_flight"]
                    and lane
                ),
                90,
                "tune-a's lane to roll back and every proxy to ACK it",
                interval=0.25,
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}; tune-a's lane: {lanes(stack)['tune-a']}") from None
        after = len(clients.answers)
        wait_until(lambda: len(clients.answers) > after + 600, 60, "answers after the rollback")
    assert rolled["reason"].startswith("rolled back: error_rate fail"), rolled["reason"]
    other = lanes(stack)["tune-b"]
    assert (other["phase"], other["weight"]) == ("progressing", 10)
    assert all(entry["target"] != "rolled_back" for entry in other["history"])
    assert stack.status()["routing"]["weights"] == {"control": 90, "tune-a": 0, "tune-b": 10}
    failed = [answer for answer in clients.answers if answer[1] != 200]
    assert failed == [], f"{len(failed)} clients saw an error, first {failed[:3]}"
    healthy, late = clients.pods_by_key(0, before), clients.pods_by_key(after)
    tune_b = {key for key, served in healthy.items() if served == {PODS["tune-b"]}}
    tune_a = {key for key, served in healthy.items() if served == {PODS["tune-a"]}}
    assert tune_b, "no client was in tune-b's cohort"
    assert tune_a, "no client was in tune-a's cohort"
    for key, served in clients.pods_by_key().items():
        if key in tune_b:  # before, during and after tune-a's failure and rollback: tune-b's pod alone
            assert served == {PODS["tune-b"]}, (key, served)
    assert all(late[key] == {PODS["control"]} for key in tune_a if key in late)  # back on the baseline
    assert sum(1 for key in tune_a if key in late) > len(tune_a) / 2
    assert pods[PODS["tune-b"]].hits > 0
    reason = {"rollout": "tunes-tune-a", "reason": "error_rate"}
    assert gateway_metric(stack, "graystack_rollout_rollbacks_total", reason) == 1
    shown = stack.cli("status")
    assert "candidate tune-a (lane tune-a vs control)" in shown
    assert "candidate tune-b (lane tune-b vs control)" in shown
