"""Kubernetes Events: how a refused spec edit and the rollout's story reach `kubectl describe configmap` and
`kubectl get events`."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gateway.kubernetes.api import call_json
from gateway.rollout.story import RolloutEvent

log = logging.getLogger(__name__)

COMPONENT = "graystack-gateway"
MESSAGE_LIMIT = 1024  # the API server refuses longer Event messages


def report(
    api: client.ApiClient,
    involved: dict[str, Any],
    reason: str,
    message: str,
    kind: str = "Warning",
    source: str = "",
) -> None:
    """A core/v1 Event about `involved` (an object as the server sent it); a failure is logged, not
    raised: the gateway's work does not depend on the Event being written."""
    meta = involved["metadata"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion", "v1"),
            "kind": involved.get("kind", "ConfigMap"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": kind,
        "source": {"component": COMPONENT, "host": source},
        "reportingComponent": COMPONENT,
        "reportingInstance": source,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        call_json(client.CoreV1Api(api).create_namespaced_event, meta["namespace"], body)
    except Exception as error:
        log.warning("could not record the %s event on %s: %s", reason, meta["name"], error)


class EventRecorder:
    """This replica's Events, a part the process is given: a refused spec edit on the spec's ConfigMap,
    and, while it leads, the rollout's story (gateway/rollout/story.py) on the state ConfigMap (a
    follower replays the leader's states: it would tell the same story twice). Written from the event
    loop's executor once `start` gave it the loop; before, nothing is written."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        state_configmap: str,
        identity: str,
        leading: Callable[[], bool],
    ) -> None:
        self.api = api
        self.identity = identity
        self._leading = leading
        self._named = {"metadata": {"name": state_configmap, "namespace": namespace}}
        self.state_object: dict[str, Any] | None = (
            None  # the state ConfigMap as last watched: the story's object
        )
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def report(self, involved: dict[str, Any], reason: str, message: str, kind: str) -> None:
        if self._loop is not None:
            self._loop.run_in_executor(
                None, functools.partial(report, self.api, involved, reason, message, kind, self.identity)
            )

    def tell(self, event: RolloutEvent) -> None:
        """A decision of the rollout, as an Event on its state ConfigMap, by the leader alone."""
        if self._leading():
            kind = "Warning" if event.warning else "Normal"
            self.report(self.state_object or self._named, event.reason, event.message, kind)
