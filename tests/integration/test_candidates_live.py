"""Several candidates in one rollout on the real stack (issue 38): the real `graystack gateway` (`direct`
provider, a look a second), the real Envoy, and a real `graystack serve` model server per variant, each
variant named otherwise than the model it serves (control serves the baseline's checkpoint, tune-a and
tune-b the zero-layer's). Keyed clients (sticky cohorts) send steady one-token requests while tune-a's
server starts failing every request: tune-a's lane alone is rolled back, its share and its clients return
to the baseline, and tune-b keeps its share and every one of its clients, none of whom ever sees an error
(the failed attempts retry on the baseline). Nothing here asserts a duration."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from graystack.local.gateway_stack import GatewayStack, answers, default_spec, graystack_argv, measuring_args
from graystack.local.processes import ManagedProcess, start_process, wait_until
from graystack.local.rollout_stack import body, fresh_weights
from tests.support.stacks import gateway_metric, running

pytestmark = pytest.mark.integration

SERVES = {"control": "baseline", "tune-a": "zero-layer", "tune-b": "zero-layer"}  # variant -> its model
REGULARS = [f"user-{i}" for i in range(200)]  # clients that come back: their variants show the cohorts
PATH = "/v1/messages"


class ThreeServers:
    """The stack's upstreams: `graystack serve` per variant, tune-a's with fault injection; the guard
    measures Envoy's counters (`--envoy-admin`)."""

    port_names = tuple(SERVES)

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.running: dict[str, ManagedProcess] = {}
        self.ports: dict[str, int] = {}

    def start(self, ports: Mapping[str, int], logs: Path) -> dict[str, Any]:
        weights = fresh_weights(self.workdir)
        self.ports = {variant: ports[variant] for variant in SERVES}
        for variant, model in SERVES.items():
            argv = [*graystack_argv(), "serve", "--variant", model, "--weights", str(weights[model])]
            argv += ["--port", str(ports[variant]), "--log-level", "warning"]
            argv += ["--enable-fault-injection"] if variant == "tune-a" else []
            self.running[variant] = start_process(variant, argv, logs)
        for variant, process in self.running.items():
            process.wait_healthy(
                partial(answers, ports[variant], "/readyz"), 120, f"{variant}'s model server"
            )
        spec = default_spec(0, 0)
        spec["name"] = "tunes"
        spec["variants"] = {v: {"endpoints": [f"127.0.0.1:{port}"]} for v, port in self.ports.items()}
        spec["routing"] = {"weights": {"control": 100}, "affinity": [{"header": "x-user-id"}]}
        spec["retries"]["fallback"] = "control"
        spec["outlier_detection"] = (
            None  # a failing server keeps its requests: the guard, not Envoy, judges it
        )
        spec["strategy"] = {"steps": [{"weight": 10, "hold": "1h"}, {"weight": 30}]}
        spec["analysis"] = {
            "interval": "1s",
            "max_latency_ratio": None,
            "max_ttft_p95": None,
            "expected_weight_status": None,
        }
        return spec

    def fail_every_request(self, variant: str) -> None:
        change = {"error_rate": 1.0, "added_latency_ms": 0}
        url = f"http://127.0.0.1:{self.ports[variant]}/admin/faults"
        httpx.post(url, json=change, timeout=5).raise_for_status()

    def gateway_args(self, envoy_admin: str) -> list[str]:
        return measuring_args(envoy_admin, [])

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        return {}

    def processes(self) -> list[ManagedProcess]:
        return list(self.running.values())


class ServedStack(GatewayStack):
    """The stack whose first request, like every client's here, is a model server's one-token answer."""

    def request(self, headers: dict[str, str] | None = None) -> httpx.Response:
        return self.client.post(PATH, json=body(), headers=headers)


@pytest.fixture
def servers(tmp_path) -> ThreeServers:
    return ThreeServers(tmp_path)


@pytest.fixture
def stack(servers, tmp_path, envoy_binary) -> Iterator[GatewayStack]:
    yield from running(ServedStack(tmp_path, envoy_binary, upstreams=servers))


class KeyedClients:
    """Requests one after another, half from `REGULARS` and half from new clients (the tests count a client
    once per stage, gateway/metrics/client_units.py: a regression that starts mid-stage is seen in the
    clients new to it), each answer recorded in order with the client's key and the variant that served."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=15.0)
        self.answers: list[tuple[str, int, str]] = []  # (key, status, the variant that answered)
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
        while not self.stopped.is_set():
            key = draw.choice(REGULARS) if draw.random() < 0.5 else f"new-{len(self.answers)}"
            response = self.client.post(PATH, json=body(), headers={"x-user-id": key})
            self.answers.append((key, response.status_code, response.headers.get("x-graystack-variant", "")))

    def served_by_key(self, since: int = 0, until: int | None = None) -> dict[str, set[str]]:
        served: dict[str, set[str]] = defaultdict(set)
        for key, _, variant in self.answers[since:until]:
            if key in REGULARS:
                served[key].add(variant)
        return served


def lanes(stack: GatewayStack) -> dict[str, dict[str, Any]]:
    return {lane["candidate"]: lane for lane in stack.status()["rollout"]["candidates"]}


def test_a_failing_candidate_is_rolled_back_alone_and_the_others_clients_keep_their_variant(stack, servers):
    assert {c: (lane["phase"], lane["weight"]) for c, lane in lanes(stack).items()} == {
        "tune-a": ("progressing", 10),
        "tune-b": ("progressing", 10),
    }
    with KeyedClients(stack.client.base_url) as clients:
        wait_until(lambda: len(clients.answers) > 400, 90, "answers to most regulars on the healthy split")
        before = len(clients.answers)
        servers.fail_every_request("tune-a")
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
        wait_until(lambda: len(clients.answers) > after + 400, 90, "answers after the rollback")
    assert rolled["reason"].startswith("rolled back: error_rate fail"), rolled["reason"]
    other = lanes(stack)["tune-b"]
    assert (other["phase"], other["weight"]) == ("progressing", 10)
    assert all(entry["target"] != "rolled_back" for entry in other["history"])
    assert stack.status()["routing"]["weights"] == {"control": 90, "tune-a": 0, "tune-b": 10}
    failed = [answer for answer in clients.answers if answer[1] != 200]
    assert failed == [], f"{len(failed)} clients saw an error, first {failed[:3]}"
    healthy, late = clients.served_by_key(0, before), clients.served_by_key(after)
    tune_b = {key for key, served in healthy.items() if served == {"tune-b"}}
    tune_a = {key for key, served in healthy.items() if served == {"tune-a"}}
    assert tune_b, "no client was in tune-b's cohort"
    assert tune_a, "no client was in tune-a's cohort"
    for key, served in clients.served_by_key().items():
        if key in tune_b:  # before, during and after tune-a's failure and rollback: tune-b alone
            assert served == {"tune-b"}, (key, served)
    assert all(late[key] == {"control"} for key in tune_a if key in late)  # back on the baseline
    assert sum(1 for key in tune_a if key in late) > len(tune_a) / 2
    reason = {"rollout": "tunes-tune-a", "reason": "error_rate"}
    assert gateway_metric(stack, "graystack_rollout_rollbacks_total", reason) == 1
    shown = stack.cli("status")
    assert "candidate tune-a (lane tune-a vs control)" in shown
    assert "candidate tune-b (lane tune-b vs control)" in shown
