"""`notifications:` in the spec: where the rollout's events go (gateway/notify/ sends them).

A list of receivers, or a mapping `{receivers: [...], dashboard_url, inconclusive_after}` where the
messages should link a dashboard or the inconclusive alarm should fire sooner or later than 30 min.
A receiver's signing secret is named by a file or an environment variable, never written in the spec:
the spec is a ConfigMap or a file in a repository, readable by more people than the secret. Whether
the secret can be read is checked where the gateway takes the spec (`secret_problems`, called by
gateway/service.py), not here: the CLI validates the same spec on a machine without it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from gateway.spec.fields import Duration, SpecModel

# Every event a receiver can ask for (gateway/notify/events.py makes them).
EVENTS = (
    "step_taken",
    "stage_holding",
    "paused",
    "inconclusive_too_long",
    "rolled_back",
    "rollback_acked",
    "rollback_confirmed_late",
    "promoted",
    "spec_refused",
    "capacity_not_ready",
    "split_not_served",
    "incident_cleared",
    "experiment_concluded",
)
INCONCLUSIVE_AFTER = 1800.0  # seconds a stage may stay inconclusive past its hold before it is told (30m)


class Receiver(SpecModel):
    """One webhook: Slack's incoming-webhook format or the structured event as JSON; `events` None: all."""

    url: str
    format: Literal["json", "slack"] = "json"
    events: tuple[str, ...] | None = None  # a tuple: a receiver is hashable (gateway/notify keeps its queue)
    secret_file: str | None = None
    secret_env: str | None = None

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            scheme = parts.scheme or "no"
            raise ValueError(f"must be an http(s) URL with a host ({scheme} scheme given)")
        return url

    @field_validator("events")
    @classmethod
    def _known(cls, events: tuple[str, ...] | None) -> tuple[str, ...] | None:
        unknown = sorted(set(events or ()) - set(EVENTS))
        if unknown:
            raise ValueError(f"unknown event(s) {unknown}; the events are {list(EVENTS)}")
        return events

    @model_validator(mode="after")
    def _one_secret(self) -> Receiver:
        if self.secret_file is not None and self.secret_env is not None:
            raise ValueError("name the secret by `secret_file` or `secret_env`, not both")
        return self

    @property
    def host(self) -> str:
        """How status and metrics name the receiver: its host and port, never the path (Slack's
        webhook URLs carry their token there)."""
        return host_of(self.url)

    def wants(self, event: str) -> bool:
        return self.events is None or event in self.events


class Notifications(SpecModel):
    receivers: list[Receiver] = []
    dashboard_url: str | None = None
    inconclusive_after: Duration = Field(default=INCONCLUSIVE_AFTER, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _a_list_is_the_receivers(cls, data: Any) -> Any:
        return {"receivers": data} if isinstance(data, list) else data


def host_of(url: str) -> str:
    """`hooks.slack.com` of `https://hooks.slack.com/services/T0/B0/secret`; '' where there is none."""
    try:
        parts = urlsplit(url)
        return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else ""
    except ValueError:
        return ""


def read_secret(receiver: Receiver) -> bytes | None:
    """The receiver's signing secret (None: it signs nothing); OSError or KeyError where it is gone."""
    if receiver.secret_file is not None:
        return Path(receiver.secret_file).read_bytes().strip()
    if receiver.secret_env is not None:
        return os.environ[receiver.secret_env].encode()
    return None


def secret_problems(notifications: Notifications) -> list[str]:
    """Each receiver whose secret cannot be read here, the field named; [] when every one can."""
    problems = []
    for i, receiver in enumerate(notifications.receivers):
        where = f"notifications.receivers.{i}"
        try:
            secret = read_secret(receiver)
        except OSError as error:
            problems.append(f"{where}.secret_file: cannot read it: {error.strerror or error}")
            continue
        except KeyError:
            problems.append(f"{where}.secret_env: {receiver.secret_env} is not set")
            continue
        if secret is not None and not secret:
            field = "secret_file" if receiver.secret_file else "secret_env"
            problems.append(f"{where}.{field}: the secret is empty")
    return problems
