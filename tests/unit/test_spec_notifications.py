"""`notifications:` in the spec: what is refused, with the field named, and that a refused one (a secret
that cannot be read where the gateway runs) leaves the last good spec live."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.service import Gateway
from gateway.spec.model import SpecError, parse_spec, validate_spec
from gateway.spec.notifications import EVENTS, Receiver, host_of
from gateway.xds.cache import SnapshotCache
from tests.unit.test_gateway_service import spec
from tests.unit.test_spec import DESIGN_EXAMPLE


@pytest.fixture
def gateway() -> Gateway:
    running = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0)
    running.load(spec(), "sha-1")
    return running


def with_notifications(value) -> str:
    return DESIGN_EXAMPLE + yaml.safe_dump({"notifications": value})


def refusal(value) -> str:
    with pytest.raises(SpecError) as refused:
        parse_spec(with_notifications(value), source="spec.yaml")
    return str(refused.value)


def test_a_list_is_the_receivers_and_events_default_to_all():
    parsed = parse_spec(
        with_notifications(
            [
                {"url": "https://hooks.example/x", "format": "slack", "events": ["rolled_back", "promoted"]},
                {"url": "http://ops:8080/graystack", "secret_env": "HOOK_SECRET"},
            ]
        )
    )
    slack, ops = parsed.notifications.receivers
    assert (slack.format, slack.wants("promoted"), slack.wants("step_taken")) == ("slack", True, False)
    assert (ops.format, all(ops.wants(event) for event in EVENTS)) == ("json", True)
    assert parsed.notifications.inconclusive_after == 1800.0
    assert parse_spec(DESIGN_EXAMPLE).notifications.receivers == []


def test_the_mapping_form_sets_the_dashboard_link_and_the_inconclusive_alarm():
    parsed = parse_spec(
        with_notifications(
            {
                "receivers": [{"url": "http://127.0.0.1:9/x"}],
                "dashboard_url": "https://grafana.example/d/rollout",
                "inconclusive_after": "45m",
            }
        )
    )
    assert parsed.notifications.dashboard_url == "https://grafana.example/d/rollout"
    assert parsed.notifications.inconclusive_after == 2700.0


@pytest.mark.parametrize(
    ("receiver", "named"),
    [
        ({"url": "ftp://hooks.example/x"}, "notifications.receivers.0.url: must be an http(s) URL"),
        ({"url": "hooks.example/x"}, "notifications.receivers.0.url: must be an http(s) URL"),
        ({"url": "http://h/x", "events": ["rolledback"]}, "notifications.receivers.0.events: unknown event"),
        ({"url": "http://h/x", "format": "teams"}, "notifications.receivers.0.format"),
        ({"url": "http://h/x", "secret": "hunter2"}, "notifications.receivers.0.secret: Extra inputs"),
        (
            {"url": "http://h/x", "secret_file": "/a", "secret_env": "B"},
            "notifications.receivers.0: name the secret by `secret_file` or `secret_env`, not both",
        ),
    ],
)
def test_bad_receivers_are_refused_with_the_field_named(receiver, named):
    assert named in refusal([receiver])


def test_a_refused_url_is_not_echoed():
    """A webhook URL's path is often its token: the refusal names the field, not the URL."""
    assert "T0SECRET" not in refusal([{"url": "ftp://hooks.example/services/T0SECRET"}])


def test_a_missing_secret_file_is_refused_where_the_gateway_takes_the_spec_and_the_last_good_stays(tmp_path):
    told: list[str] = []
    gateway = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0, on_refused=(told.append,))
    gateway.load(spec(), "sha-1")
    live = gateway.live
    missing = tmp_path / "hook-secret"
    bad = spec(notifications=[{"url": "http://ops:8080/x", "secret_file": str(missing)}])  # validates
    gateway.load(bad, "sha-2")
    assert gateway.live is live
    message = gateway.status().spec.last_error.message
    assert message.startswith("spec.yaml: notifications.receivers.0.secret_file: cannot read it: ")
    assert told == [message]

    missing.write_text("s3cret\n")
    gateway.load(bad, "sha-3")
    assert gateway.status().spec.last_error is None
    assert gateway.live.notifications.receivers[0].secret_file == str(missing)


def test_an_unset_or_empty_secret_is_refused(gateway, monkeypatch, tmp_path):
    monkeypatch.delenv("GRAYSTACK_TEST_HOOK", raising=False)
    gateway.load(spec(notifications=[{"url": "http://h/x", "secret_env": "GRAYSTACK_TEST_HOOK"}]), "sha-2")
    assert "notifications.receivers.0.secret_env: GRAYSTACK_TEST_HOOK is not set" in (
        gateway.status().spec.last_error.message
    )
    (tmp_path / "empty").write_text("\n")
    gateway.load(spec(notifications=[{"url": "http://h/x", "secret_file": str(tmp_path / "empty")}]), "s")
    assert (
        "notifications.receivers.0.secret_file: the secret is empty"
        in gateway.status().spec.last_error.message
    )


def test_a_split_change_does_not_read_the_secret_again(tmp_path):
    """The rollout's pushes validate the spec again: a secret file removed later must not stop them."""
    secret = tmp_path / "s"
    secret.write_text("x")
    good = spec(notifications=[{"url": "http://h/x", "secret_file": str(secret)}])
    secret.unlink()
    assert good.with_split({"baseline": 50, "zero-layer": 50}).routing.weights["zero-layer"] == 50
    assert validate_spec(good.model_dump()).notifications == good.notifications


def test_status_names_a_receiver_by_its_host_only():
    receiver = Receiver(url="https://hooks.slack.com/services/T0/B0/secret-token")
    assert receiver.host == "hooks.slack.com"
    assert host_of("http://127.0.0.1:8080/hook?token=x") == "127.0.0.1:8080"
