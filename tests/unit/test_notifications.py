"""Notifications from the real rollout controller (fake clock, counting provider, the real Gateway and
ADS server) to real HTTP receivers on loopback: one signed message per event of a scripted rollout, and a
receiver that never answers changes no decision, holds up no look, and shows its failures."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

import httpx
import pytest
from fastapi.testclient import TestClient

from gateway.admin.api import create_admin_app
from gateway.notify.delivery import Delivery
from gateway.notify.notifier import Notifier
from gateway.rollout.rollout_state import Command
from gateway.spec.model import validate_spec
from gateway.spec.yaml12 import load_yaml
from gateway.xds.server import AdsServer
from graystack.admin_client import AdminClient
from graystack.console.status_view import render_status
from tests.support.clock import FakeClock
from tests.support.counting_provider import CountingProvider, Traffic
from tests.support.webhook_receiver import Recorder, blackhole, recording
from tests.unit.test_rollout_controller import (
    FAILING,
    HEALTHY,
    NAME,
    PartitionedFleet,
    metric,
    new_controller,
    new_gateway,
    spec_data,
)
from tests.unit.test_spec import DESIGN_EXAMPLE

FAST = {**HEALTHY, "zero-layer": Traffic(5000, ttft=0.02)}  # passes the shadow gate's latency ratio
SHORT = {**HEALTHY, "zero-layer": Traffic(3)}  # too few candidate requests to decide anything
SECRET = b"test-hook-secret"
QUICK = Delivery(attempts=2, timeout=0.2, backoff=0.05)


def spec_with(receivers: list[dict], **settings) -> dict:
    data = load_yaml(DESIGN_EXAMPLE)
    data["notifications"] = {"receivers": receivers, **settings}
    return data


def notified(data: dict, tmp_path, clock, provider, delivery: Delivery = QUICK):
    """A gateway on `data` and its controller, each telling a notifier, given at construction as the
    gateway process does (gateway/app.py)."""
    notifier = Notifier(lambda: gateway.spec, delivery, clock)
    gateway = new_gateway(data, on_refused=(notifier.on_refused,))
    controller = new_controller(gateway, tmp_path, clock, provider, watchers=(notifier.on_fact,))
    return gateway, controller, notifier


async def until(condition, what: str, seconds: float = 20.0) -> None:
    """Poll `condition` while the event loop runs the senders; fail naming `what` (no timing asserted)."""
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"never: {what}")


def documents(recorder: Recorder) -> list[dict]:
    return [json.loads(message.body) for message in recorder.snapshot()]


async def test_a_scripted_rollout_sends_one_signed_message_per_event(tmp_path):
    clock = FakeClock()
    secret = tmp_path / "hook-secret"
    secret.write_bytes(SECRET + b"\n")
    with recording() as (hooks, port), recording() as (slack, slack_port):
        data = spec_with(
            [
                {"url": f"http://127.0.0.1:{port}/graystack", "secret_file": str(secret)},
                {
                    "url": f"http://127.0.0.1:{slack_port}/services/T0/B0/token",
                    "format": "slack",
                    "events": ["rolled_back", "promoted"],
                },
            ],
            dashboard_url="https://grafana.example/d/rollout",
            inconclusive_after="100s",
        )
        provider = CountingProvider(FAST)
        gateway, controller, notifier = notified(data, tmp_path, clock, provider)

        async def look(seconds: float, traffic=None) -> None:
            provider.per_look = traffic or provider.per_look
            clock.now += seconds
            await controller.tick()

        await look(400)  # shadow: the error rate's test is not decided yet (stage_holding)
        await look(400)  # ... then it is: step 0 (step_taken)
        await controller.command(Command.PAUSE)  # paused
        await controller.command(Command.RESUME)
        await look(700, HEALTHY)  # step 1 (step_taken)
        for _ in range(4):  # its hold done, too few requests: one stage_holding, one inconclusive alarm
            await look(60 if _ else 1800, SHORT)
        await look(60, HEALTHY)  # step 2, 100 % (step_taken)
        await look(60)  # promoted
        gone = [{"url": "http://127.0.0.1:9/x", "secret_file": str(tmp_path / "gone")}]
        gateway.load(validate_spec({**data, "notifications": gone}), "sha-2")  # spec_refused
        await look(10, FAILING)  # rolled_back, then rollback_acked (no proxy: ACKed by every one of none)

        kinds = [
            "stage_holding",
            "step_taken",
            "paused",
            "step_taken",
            "stage_holding",
            "inconclusive_too_long",
            "step_taken",
            "promoted",
            "spec_refused",
            "rolled_back",
            "rollback_acked",
        ]
        await until(lambda: len(hooks.snapshot()) >= len(kinds) and len(slack.snapshot()) >= 2, "all sent")
        await asyncio.sleep(0.2)  # nothing more arrives
        await notifier.stop()

    sent = documents(hooks)
    assert [d["event"] for d in sent] == kinds
    for message, document in zip(hooks.snapshot(), sent, strict=True):
        assert message.path == "/graystack"
        assert message.headers["x-graystack-event"] == document["event"]
        timestamp = message.headers["x-graystack-timestamp"]
        mac = hmac.new(SECRET, f"{timestamp}.".encode() + message.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(message.headers["x-graystack-signature"], f"sha256={mac}")
        assert document["rollout"] == NAME
        assert document["dashboard_url"] == "https://grafana.example/d/rollout"
        assert document["text"].startswith(f"{NAME}: ")
        assert document["text"].endswith(".")

    by_kind = {d["event"]: d for d in sent}
    holding = sent[4]
    assert holding["hold_reason"].startswith("inconclusive")
    assert holding["requests_still_needed"] > 0
    assert holding["requests_still_needed"] == holding["stage_requests_needed"] - holding["stage_requests"]
    assert {"log_evalue", "log_bound", "samples", "verdict"} <= set(holding["checks"][0])
    assert "more candidate requests needed" in holding["text"]
    assert (sent[1]["stage"], sent[1]["weight"], sent[3]["weight"]) == ("step 0", 5, 20)
    assert by_kind["paused"]["text"].endswith("`graystack resume` continues it.")
    assert by_kind["promoted"]["phase"] == "promoted"
    assert "notifications.receivers.0.secret_file" in by_kind["spec_refused"]["message"]
    failing = by_kind["rolled_back"]["failing_checks"]
    assert failing[0]["name"] == "error_rate"
    assert failing[0]["log_evalue"] >= failing[0]["log_bound"]
    assert by_kind["rolled_back"]["text"].endswith("fix the candidate, then `graystack retry`.")
    assert by_kind["rollback_acked"]["pending_proxies"] == []
    assert by_kind["rollback_acked"]["ack_seconds"] >= 0

    slack_messages = [json.loads(m.body) for m in slack.snapshot()]
    assert [list(m) for m in slack_messages] == [["text"], ["text"]]
    assert "promoted" in slack_messages[0]["text"]
    assert "rolled back" in slack_messages[1]["text"]
    assert slack_messages[1]["text"].endswith("<https://grafana.example/d/rollout|Dashboard>")
    assert "x-graystack-signature" not in slack.snapshot()[0].headers  # no secret: unsigned
    receivers = {r.receiver: r for r in notifier.status().receivers}
    assert receivers[f"127.0.0.1:{slack_port}"].delivered == 2  # named by host, never by the token's path


async def test_a_blackholed_receiver_delays_no_look_and_its_failures_show(tmp_path):
    async def scripted(controller, provider, clock) -> list[tuple]:
        """Shadow, step 0, then a fault: the transitions, as the fake clock dates them."""
        for _ in range(2):
            clock.now += 400
            await controller.tick()
        provider.per_look = FAILING
        clock.now += 10
        await controller.tick()
        return [(t.at, t.source, t.target) for t in controller.status().history]

    alone = FakeClock()
    unwatched = CountingProvider(FAST)
    without = await scripted(
        new_controller(new_gateway(spec_with([])), tmp_path / "alone", alone, unwatched), unwatched, alone
    )
    clock = FakeClock()
    with blackhole() as port:
        data = spec_with([{"url": f"http://127.0.0.1:{port}/hook"}])
        provider = CountingProvider(FAST)
        # One waiting message at most (the next drops it); an attempt waits 1 s for an answer that never comes.
        one = Delivery(queue=1, attempts=1, timeout=1.0)
        gateway, controller, notifier = notified(data, tmp_path, clock, provider, one)
        # The same decisions at the same looks as with no receiver; the rollback at the fault's look, and
        # the looks returned with every message still unsent.
        assert await scripted(controller, provider, clock) == without
        assert without[-1] == (clock.now, "step 0", "rolled_back")
        sending = notifier.status().receivers[0]
        assert (sending.delivered, sending.failed) == (0, 0)
        name = f"127.0.0.1:{port}"

        await until(lambda: notifier.status().receivers[0].failed >= 1, "a failed delivery")
        await until(lambda: notifier.status().receivers[0].dropped >= 1, "a dropped message")
        receiver = notifier.status().receivers[0]
        event, why = receiver.last_error.split(": ")
        assert why == "ReadTimeout"
        assert metric("graystack_notifications_total", receiver=name, event=event, outcome="failed") >= 1
        assert metric("graystack_notification_queue_dropped_total", receiver=name) >= 1
        app = create_admin_app(
            gateway, AdsServer(gateway.cache), controller=controller, notifications=notifier.status
        )
        with TestClient(app) as admin:
            answer = admin.get("/v1/status").json()
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
        with AdminClient("http://gateway", transport=transport) as client:
            shown = client.status()  # the CLI parses the section back
        assert shown.notifications.receivers[0].receiver == name
        assert f"NOTIFY    {name}: " in render_status(shown)
        assert "/hook" not in json.dumps(answer)  # by host only
        await notifier.stop()


async def test_a_rollback_pending_on_a_proxy_cut_off_is_told_then_its_late_confirmation(tmp_path):
    clock = FakeClock()
    clock.now = 100.0
    fleet = PartitionedFleet()
    with recording() as (hooks, port):
        data = spec_data(notifications=[{"url": f"http://127.0.0.1:{port}/"}])
        gateway = new_gateway(data)
        notifier = Notifier(lambda: gateway.spec, QUICK, clock)
        controller = new_controller(gateway, tmp_path, clock, proxies=fleet, watchers=(notifier.on_fact,))
        await controller.command(Command.ROLLBACK)
        await until(lambda: len(hooks.snapshot()) == 2, "the rollback and its ACK")
        fleet.heal()
        await until(lambda: len(hooks.snapshot()) == 3, "the late confirmation")
        await notifier.stop()
    rolled_back, acked, late = documents(hooks)
    assert (rolled_back["event"], "failing_checks" in rolled_back) == ("rolled_back", False)
    assert "operator" in rolled_back["reason"]
    assert (acked["event"], acked["pending_proxies"]) == ("rollback_acked", ["envoy-3"])
    assert "still pending on envoy-3" in acked["text"]
    assert (late["event"], late["proxies"]) == ("rollback_confirmed_late", ["envoy-3"])


async def test_a_message_answered_503_is_sent_again_and_counted_once_delivered(tmp_path):
    clock = FakeClock()
    with recording(fail_first=1) as (hooks, port):
        data = spec_data(notifications=[{"url": f"http://127.0.0.1:{port}/"}])
        _, controller, notifier = notified(data, tmp_path, clock, CountingProvider(HEALTHY))
        await controller.command(Command.PAUSE)
        await until(lambda: notifier.status().receivers[0].delivered == 1, "the second attempt delivered")
        await notifier.stop()
    first, second = hooks.snapshot()
    assert first.body == second.body
    receiver = notifier.status().receivers[0]
    assert (receiver.failed, receiver.last_error) == (0, "paused: answered 503")
