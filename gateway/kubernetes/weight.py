"""`graystack weight zero-layer=20 --configmap NAME`: a flip written into the spec ConfigMap.

The gateway's admin API listens on loopback inside its pod, so in a cluster the flip goes where the
gateway already looks: the spec ConfigMap every replica watches. The edit is validated here (the same
parser the gateway uses) before it is written, and written with the resourceVersion it was read at, so
a concurrent edit is never overwritten (409: read again and redo). It lasts, unlike an in-memory flip,
until the next `helm upgrade` renders the ConfigMap from values again. Comments in `spec.yaml` are not
kept: the YAML is rewritten from its data.
"""

from __future__ import annotations

from collections.abc import Mapping

import yaml
from kubernetes import client

from gateway.kubernetes.api import call_json, status_of
from gateway.kubernetes.spec_source import SPEC_KEY, spec_from_configmap
from gateway.spec.model import RolloutSpec, SpecError, complete_split, parse_spec


def flipped(text: str, weights: Mapping[str, int], segment: str | None, where: str) -> str:
    """The spec text with the default split (or the `segment` rule's) set to `weights`; SpecError if the
    result is not a valid spec (unknown variant, no such segment, weights over 100)."""
    spec = parse_spec(text, source=where)
    split = complete_split(list(spec.variants), weights)
    data = yaml.safe_load(text)
    if segment is None:
        data["routing"]["weights"] = split
    else:
        rules = [rule for rule in data["routing"].get("rules") or [] if str(rule.get("value")) == segment]
        if not rules:
            raise SpecError(f"{where}: routing has no rule for {spec.routing.header}: {segment}")
        rules[0].pop("variant", None)
        rules[0]["weights"] = split
    new_text = yaml.safe_dump(data, sort_keys=False)
    parse_spec(new_text, source=where)
    return new_text


def flip_configmap(
    api: client.ApiClient,
    namespace: str,
    name: str,
    weights: Mapping[str, int],
    segment: str | None = None,
    key: str = SPEC_KEY,
    attempts: int = 3,
) -> RolloutSpec:
    """Writes the flip into the ConfigMap; returns the spec as written."""
    core = client.CoreV1Api(api)
    for _ in range(attempts):
        obj = call_json(core.read_namespaced_config_map, name, namespace)
        spec_from_configmap(obj, key)  # the stored spec must be valid to start from
        text = flipped(obj["data"][key], weights, segment, f"configmap/{namespace}/{name}[{key}]")
        obj["data"][key] = text
        try:
            call_json(core.replace_namespaced_config_map, name, namespace, obj)
        except Exception as error:
            if status_of(error) != 409:
                raise
            continue
        return parse_spec(text)
    raise SpecError(f"configmap/{namespace}/{name}: {attempts} conflicting edits in a row, try again")
