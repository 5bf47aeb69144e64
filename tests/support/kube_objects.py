"""The API stand-in's object arithmetic (tests/support/kube_api.py): a Status body, a JSON merge patch,
a Deployment's scale subresource, and which objects a list's selectors match."""

from __future__ import annotations


def status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386: a map patches a map key by key, a null removes the key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def scale_of(deployment: dict) -> dict:
    """The Deployment's `scale` subresource as the API server shows it (kind Scale, autoscaling/v1)."""
    meta = deployment["metadata"]
    labels = deployment["spec"].get("selector", {}).get("matchLabels", {})
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        },
        "spec": {"replicas": deployment["spec"].get("replicas", 1)},
        "status": {
            "replicas": deployment.get("status", {}).get("replicas", 0),
            "selector": ",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        },
    }


def matches(obj: dict, query: dict[str, str]) -> bool:
    field = query.get("fieldSelector", "")
    if field:
        key, _, value = field.partition("=")
        if key != "metadata.name" or obj["metadata"]["name"] != value:
            return False
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, query.get("labelSelector", "").split(",")):
        key, sep, value = term.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True
