"""What the Kubernetes API stand-in (tests/support/kube_api.py) does for custom resources, as a real API
server does with their CRDs installed: it validates every object written against the CRD's
`openAPIV3Schema` (of the version served, vendored under tests/crds/; answered 422 Invalid naming the
field, as the real server does), its defaults applied first and stored (a backendRef read back has its
`group`, `kind` and `weight`), and its CEL rules (`x-kubernetes-validations`) evaluated with
common-expression-language; it counts `metadata.generation` up on each change of `spec`, and keeps
`status` to the `status` subresource (a write of the object keeps the stored status; a write of
`/status` changes only that). Kubernetes' own CEL library functions (`isURL`, `quantity`, ...) are not
there: a rule that calls one is an error here, so none goes unchecked by accident.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import cel
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
    "Gateway": (
        "/apis/gateway.networking.k8s.io/v1",
        "gateways",
        "gateway-api/gateway.networking.k8s.io_gateways.yaml",
    ),
    "InferencePool": (
        "/apis/inference.networking.k8s.io/v1",
        "inferencepools",
        "inference-extension/inference.networking.k8s.io_inferencepools.yaml",
    ),
    "EnvoyProxy": (
        "/apis/gateway.envoyproxy.io/v1alpha1",
        "envoyproxies",
        "envoy-gateway/gateway.envoyproxy.io_envoyproxies.yaml",
    ),
    "EnvoyExtensionPolicy": (
        "/apis/gateway.envoyproxy.io/v1alpha1",
        "envoyextensionpolicies",
        "envoy-gateway/gateway.envoyproxy.io_envoyextensionpolicies.yaml",
    ),
}


@cache
def schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CUSTOM[kind][2]).read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return served["schema"]["openAPIV3Schema"]


def problems(kind: str, obj: dict[str, Any]) -> str | None:
    """Why `obj` (defaulted: `defaulted`) is not a valid `kind`: the first error, with its path; None
    where it is valid."""
    if kind not in CUSTOM:
        return None
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema(kind)).iter_errors(obj))
    if error is not None:
        where = ".".join(str(part) for part in error.absolute_path) or "(root)"
        return f"{kind}.{where}: {error.message}"
    broken = _rules(schema(kind), obj, kind)
    return broken[0] if broken else None


def defaulted(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the schema's defaults filled in where a field is absent, as the server stores it."""
    return _default(schema(kind), copy.deepcopy(obj)) if kind in CUSTOM else obj


def _default(node: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict) and node.get("type") == "object":
        for name, sub in node.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = _default(sub, value[name])
    elif isinstance(value, list) and node.get("type") == "array":
        value = [_default(node["items"], item) for item in value]
    return value


def _rules(node: dict[str, Any], value: Any, where: str) -> list[str]:
    """The CEL rules `value` breaks, each with its path and message, depth first."""
    broken = []
    for rule in node.get("x-kubernetes-validations", []):
        try:
            ok = cel.evaluate(rule["rule"], {"self": value})
        except Exception as error:  # a rule this library cannot run is a failure, never a pass
            ok = f"not evaluated: {error}"
        if ok is not True:
            broken.append(
                f"{where}: {rule.get('message') or rule['rule']}" + ("" if ok is False else f" ({ok})")
            )
    if isinstance(value, dict) and node.get("type") == "object":
        for name, sub in node.get("properties", {}).items():
            if name in value:
                broken += _rules(sub, value[name], f"{where}.{name}")
    elif isinstance(value, list) and node.get("type") == "array":
        for index, item in enumerate(value):
            broken += _rules(node["items"], item, f"{where}[{index}]")
    return broken


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
