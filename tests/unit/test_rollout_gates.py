"""A step's gates through the real controller (fake clock, counting provider): `approval: manual` and
its `approve`, step webhooks against a real HTTP server on 127.0.0.1, the story each decision tells
once, and the spec's refusals."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient

from gateway.admin.api import create_admin_app
from gateway.admin.protocol import Status
from gateway.rollout.gates import WEBHOOK_RETRY
from gateway.rollout.rollout_state import Command
from gateway.rollout.story import RolloutEvent, storyteller
from gateway.spec.model import SpecError, validate_spec
from gateway.xds.server import AdsServer
from graystack.console.status_view import render_status
from tests.support.clock import FakeClock
from tests.unit.test_rollout_controller import NAME, metric, new_controller, new_gateway, saved, spec_data

STEP_HOLD = 600  # the first step's hold in spec_data(): 10m


class Hook:
    """An HTTP server on 127.0.0.1 answering every POST with `status` and `body` after `delay` seconds,
    keeping the JSON bodies it was sent."""

    def __init__(self) -> None:
        self.status, self.body, self.delay = 200, "ok", 0.0
        self.requests: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(hook.delay)
                payload = hook.body.encode()
                try:
                    self.send_response(hook.status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller timed out and hung up

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/check"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def gated(**step1) -> dict:
    """spec_data() (steps 5 % for 10m, 20 % for 30m, 100 %) with gates on the step to 20 %."""
    data = spec_data()
    data["strategy"]["steps"][1].update(step1)
    return data


async def past_the_hold(controller, clock: FakeClock) -> None:
    """Two looks: the first sets where the counters start, the second comes after the step's hold."""
    await controller.tick()
    clock.now += STEP_HOLD + 1
    await controller.tick()


async def test_a_manual_gate_holds_until_approve_and_the_story_is_told_once(tmp_path, clock):
    gateway = new_gateway(gated(approval="manual"))
    told: list[RolloutEvent] = []
    controller = new_controller(gateway, tmp_path, clock, watchers=(storyteller(told.append),))

    ignored = await controller.command(Command.APPROVE)
    assert ignored is not None
    assert ignored.startswith("no step awaits approval")

    await past_the_hold(controller, clock)
    for _ in range(3):  # the hold long past, every check passing: still not taken
        clock.now += 600
        await controller.tick()
    status = controller.status()
    assert (status.step, status.weight) == (0, 5)
    assert gateway.live.routing.weights == {"baseline": 95, "zero-layer": 5}
    assert status.last_decision.outcome.startswith("hold: awaiting approval of step 1 (weight 20%)")
    assert {check.verdict for check in status.last_decision.checks} == {"pass"}  # the approver's evidence
    assert status.gate.model_dump() == {
        "step": 1,
        "weight": 20,
        "awaiting_approval": True,
        "webhook_ok": None,
        "webhook_reason": None,
        "not_worse": None,
    }

    await controller.command(Command.PAUSE)
    paused = await controller.command(Command.APPROVE)
    assert paused is not None
    assert paused.startswith("paused: resume first")
    await controller.command(Command.RESUME)
    clock.now += 5
    await controller.tick()  # the gate is judged again

    assert await controller.command(Command.APPROVE) is None  # applied
    status = controller.status()
    assert (status.step, status.weight, status.gate) == (1, 20, None)
    assert gateway.live.routing.weights == {"baseline": 80, "zero-layer": 20}
    assert saved(tmp_path)["step"] == 1
    assert status.history[-1].reason == "operator approve"
    again = await controller.command(Command.APPROVE)
    assert again is not None
    assert again.startswith("no step awaits approval")

    reasons = [event.reason for event in told]
    # One event per change, not per look: the gate told once over four looks, again after the resume.
    assert reasons == ["Holding", "AwaitingApproval", "Paused", "Resumed", "AwaitingApproval", "Approved"]
    assert told[-1].message == "Step 1 approved by an operator and taken: weight 20%."


async def test_a_step_webhook_answering_500_holds_the_step_naming_it_and_200_lets_it_go(
    tmp_path, clock, hook
):
    hook.status, hook.body = 500, "offline eval: accuracy 0.61 below 0.70\n" + "x" * 500
    gateway = new_gateway(gated(webhooks=[{"url": hook.url, "timeout": "2s"}]))
    told: list[RolloutEvent] = []
    controller = new_controller(gateway, tmp_path, clock, watchers=(storyteller(told.append),))

    await past_the_hold(controller, clock)
    assert controller.status().last_decision.outcome == "hold: calling the webhooks of step 1"
    await controller.webhooks.wait()
    await controller.tick()
    status = controller.status()
    assert status.step == 0
    reason = f"{hook.url} answered 500: offline eval: accuracy 0.61 below 0.70 {'x' * 161}"
    assert status.last_decision.outcome.startswith(f"hold: webhook before step 1: {reason} (called again")
    assert (status.gate.webhook_ok, status.gate.webhook_reason) == (False, reason)
    assert hook.requests == [{"rollout": NAME, "step": 1, "weight": 20}]
    assert [(e.reason, e.warning) for e in told] == [
        ("Holding", False),
        ("Holding", False),
        ("WebhookFailed", True),
    ]
    assert told[1].message == "Holding: calling the webhooks of step 1."

    hook.status = 200
    clock.now += 5
    await controller.tick()  # a failure is not called again at every look
    await controller.webhooks.wait()
    assert len(hook.requests) == 1
    clock.now += WEBHOOK_RETRY
    await controller.tick()
    await controller.webhooks.wait()
    await controller.tick()
    status = controller.status()
    assert (status.step, status.weight, len(hook.requests)) == (1, 20, 2)
    assert gateway.live.routing.weights == {"baseline": 80, "zero-layer": 20}
    assert told[-1].reason == "StepTaken"


async def test_a_failing_webhook_with_on_failure_rollback_rolls_back_and_a_silent_one_times_out(
    tmp_path, clock, hook
):
    hook.status, hook.body = 503, "change freeze until Monday"
    gateway = new_gateway(gated(webhooks=[{"url": hook.url, "on_failure": "rollback"}]))
    controller = new_controller(gateway, tmp_path, clock)
    before = metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="webhook")
    await past_the_hold(controller, clock)
    await controller.webhooks.wait()
    await controller.tick()
    status = controller.status()
    assert (status.phase, status.weight) == ("rolled_back", 0)
    assert (
        status.reason
        == f"rolled back: webhook before step 1: {hook.url} answered 503: change freeze until Monday"
    )
    assert metric("graystack_rollout_rollbacks_total", rollout=NAME, reason="webhook") == before + 1

    hook.delay = 1.0
    silent = new_controller(
        new_gateway(gated(webhooks=[{"url": hook.url, "timeout": "200ms"}])), tmp_path / "b", clock
    )
    await past_the_hold(silent, clock)
    started = time.monotonic()
    await silent.webhooks.wait()
    assert time.monotonic() - started < 0.9
    await silent.tick()
    assert silent.status().gate.webhook_reason == f"{hook.url} did not answer within 0.2s"
    assert silent.status().step == 0


async def test_approve_through_the_admin_api_needs_the_token_and_graystack_status_shows_the_gate(
    tmp_path, clock
):
    gateway = new_gateway(gated(approval="manual"))
    controller = new_controller(gateway, tmp_path, clock)
    await past_the_hold(controller, clock)
    app = create_admin_app(gateway, AdsServer(gateway.cache), controller=controller, token="s3cret")
    with TestClient(app) as admin:
        assert admin.post("/v1/rollout/approve").status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        text = render_status(Status.model_validate(admin.get("/v1/status", headers=auth).json()))
        answer = admin.post("/v1/rollout/approve", headers=auth).json()
    assert "approval  the step to 20% AWAITS `graystack approve`" in text
    assert "analysis  hold: awaiting approval of step 1 (weight 20%)" in text
    assert "error_rate        PASS" in text  # the evidence beside it
    assert (answer["applied"], answer["rollout"]["label"], answer["rollout"]["weight"]) == (
        True,
        "step 1",
        20,
    )


@pytest.mark.parametrize(
    ("step", "field", "message"),
    [
        ({"approval": "sometimes"}, "strategy.steps.1.approval", "'manual'"),
        (
            {"webhooks": [{"url": "ftp://eval/check"}]},
            "strategy.steps.1.webhooks.0.url",
            "not an http(s) URL",
        ),
        (
            {"webhooks": [{"url": "http://eval:8080", "on_failure": "page"}]},
            "strategy.steps.1.webhooks.0.on_failure",
            "'hold'",
        ),
        (
            {"webhooks": [{"url": "http://eval:8080", "timeout": 0}]},
            "strategy.steps.1.webhooks.0.timeout",
            "above 0",
        ),
    ],
)
def test_an_unknown_approval_or_a_bad_webhook_is_refused_with_its_field(step, field, message):
    with pytest.raises(SpecError) as refused:
        validate_spec(gated(**step))
    assert field in str(refused.value)
    assert message in str(refused.value)
