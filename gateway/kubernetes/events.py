"""Kubernetes Events: how a refused spec edit reaches `kubectl describe configmap` and `kubectl get events`."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kubernetes import client

from gateway.kubernetes.api import call_json

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
