"""What the Kubernetes API stand-in (tests/support/kube_api.py) does for custom resources, as a real API
server does with their CRDs installed: it validates every object written against the CRD's
`openAPIV3Schema` (of the version served, vendored under tests/crds/; answered 422 Invalid naming the
field, as the real server does), counts `metadata.generation` up on each change of `spec`, and keeps
`status` to the `status` subresource (a write of the object keeps the stored status; a write of
`/status` changes only that). The schemas' CEL rules (`x-kubernetes-validations`) are not evaluated.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[1] / "crds"
# kind -> (API prefix, resource, the vendored CRD file under tests/crds/)
CUSTOM = {
    "HTTPRoute": (
        "/apis/gateway.networking.k8s.io/v1",
        "httproutes",
        "gateway-api/gateway.networking.k8s.io_httproutes.yaml",
    ),
}


@cache
def schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CUSTOM[kind][2]).read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return served["schema"]["openAPIV3Schema"]


def problems(kind: str, obj: dict[str, Any]) -> str | None:
    """Why `obj` is not a valid `kind` (the first error, with its path), None where it is."""
    if kind not in CUSTOM:
        return None
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema(kind)).iter_errors(obj))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "(root)"
    return f"{kind}.{where}: {error.message}"


def stored(
    kind: str, written: dict[str, Any], current: dict[str, Any] | None, status_only: bool
) -> dict[str, Any]:
    """What the server keeps of a write: for a custom resource, the generation counted up when `spec`
    changed, and `status` taken from the subresource write alone."""
    if kind not in CUSTOM:
        return written
    out = copy.deepcopy(written)
    before = current or {"metadata": {"generation": 0}}
    if status_only and current is not None:
        out = {**copy.deepcopy(current), "status": copy.deepcopy(written.get("status", {}))}
    else:
        out.pop("status", None)  # a write of the object leaves the status as it stood
        if current is not None and "status" in current:
            out["status"] = copy.deepcopy(current["status"])
    changed = current is None or out.get("spec") != current.get("spec")
    out["metadata"]["generation"] = before["metadata"].get("generation", 0) + (1 if changed else 0)
    return out
