"""What the picker is fed from the gateway process (issue 37): the live spec's split (its default, its
header segments, its cohort header) and the InferencePool's pods grouped by variant, as one `Wanted`. Pure:
the process calls it at every pick's read, so a step, a flip or a rollback reaches the next pick at once
(gateway/kubernetes/pool.py reads the pods).

A pod is one of the pool's when it is Running, Ready and matches the pool's selector; its variant is its
`endpoint_picker.variant_label` value; it serves at each of the pool's target ports (data-parallel ranks
are endpoints of their own). A model variant (`endpoint_picker.models`) has no pods of its own: the
baseline's serve it, its requests' `model` rewritten. The scorers' weights: `endpoint_picker`'s, or
`envoy_picker`'s where the gateway serves its own Envoy's picker (gateway/epp/envoys.py). Cohorts: the first header source of `routing.affinity` (a cookie or body
source is not read by the picker: its requests are split at random).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.epp.wanted import Wanted
from gateway.spec.affinity import cohort_header
from gateway.spec.endpoint_picker import SCORERS, EndpointPicker, Prefix
from gateway.spec.model import RolloutSpec


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return status.get("phase") == "Running" and bool(status.get("podIP")) and ready


def pool_endpoints(
    pool: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    picker: EndpointPicker,
    variants: Iterable[str],
) -> dict[str, tuple[str, ...]]:
    """Each variant's endpoints (`ip:port`) among the pool's ready pods, sorted; a variant without any is
    left out (it takes no share: gateway/epp/choice.py)."""
    spec = pool.get("spec", {})
    wanted = spec.get("selector", {}).get("matchLabels", {})
    ports = [p["number"] for p in spec.get("targetPorts", [])]
    by_value = {picker.value_of(variant): variant for variant in variants if variant not in picker.models}
    found: dict[str, list[str]] = {}
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        variant = by_value.get(labels.get(picker.variant_label, ""))
        if variant is None or not _ready(pod) or any(labels.get(k) != v for k, v in wanted.items()):
            continue
        found.setdefault(variant, []).extend(f"{pod['status']['podIP']}:{port}" for port in ports)
    return {variant: tuple(sorted(endpoints)) for variant, endpoints in found.items()}


def wanted_from(spec: RolloutSpec, pods: Mapping[str, tuple[str, ...]], baseline: str) -> Wanted:
    """The live spec's split over the pods there are (a variant with none gets no share)."""
    routing = spec.routing
    models = dict(spec.endpoint_picker.models) if spec.endpoint_picker else {}
    present = {variant: pods.get(variant, ()) for variant in spec.variants if variant not in models}
    cohort = cohort_header(routing.affinity)
    scoring = spec.endpoint_picker or spec.envoy_picker  # the spec refuses both at once
    return Wanted(
        pods=present,
        weights=dict(routing.weights),
        baseline=baseline,
        segment_header=routing.header if routing.rules else None,
        segments={rule.value: rule.split() for rule in routing.rules},
        cohort_header=cohort,
        scorers=scoring.weights() if scoring else dict(SCORERS),
        models=models,
        prefix=spec.endpoint_picker.prefix if spec.endpoint_picker else Prefix(),
    )
