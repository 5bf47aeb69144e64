"""The variants' replicas set from the split, in the cluster: the I/O edge of gateway/rollout/capacity.py.

At each look of the leader's controller (`look`, on a worker thread) each variant's Deployment is read
once: the replicas it wants for the live split go to it through the scale subresource (patched only
where its `spec.replicas` differs, so a steady rollout writes nothing), or, where the variant names an
HPA, to the HPA's `spec.minReplicas` (Flagger's way: the autoscaler keeps scaling above it, and the
rollout and the autoscaler do not fight over `replicas`). The same read counts its pods
(`status.replicas`, `readyReplicas`) for status, the `graystack_variant_replicas` gauges and, with a
GPU-hour price, what they cost; the candidate's ready pods are the gate the machine waits on.

An API call that fails is logged and holds the stage (the gate is shut with the error as its reason):
the machine's timeout turns a lasting failure into an alert, never an advance onto unknown capacity.
RBAC: get on `deployments` and patch on `deployments/scale` (or get/patch on
`horizontalpodautoscalers`) of the named objects only (charts/graystack/templates/rbac.yaml).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gateway.kubernetes.api import call_json
from gateway.rollout.capacity import (
    CapacitySettings,
    Pods,
    VariantCapacity,
    capacity_plan,
    capacity_view,
    gate,
)
from gateway.rollout.plan import roles
from gateway.rollout.rollout_state import CapacityGate, RolloutState
from gateway.spec.model import RolloutSpec, Routing, SpecError

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class CapacityError(Exception):
    """The cluster cannot give the split its replicas as configured; the message says why."""


def why(error: Exception) -> str:
    """An API call's failure in one line: the status and the API server's message (a 403 names the
    verb and resource RBAC lacks), else the exception."""
    if isinstance(error, ApiException) and error.status:
        try:
            message = json.loads(error.body or "")["message"]
        except (TypeError, ValueError, KeyError):
            message = error.reason
        return f"{error.status}: {message}"
    return str(error) if isinstance(error, CapacityError) else f"{type(error).__name__}: {error}"


class DeploymentCapacity:
    def __init__(self, api: client.ApiClient, namespace: str, settings: CapacitySettings) -> None:
        self.namespace = namespace
        self.settings = settings
        self._apps = client.AppsV1Api(api)
        self._autoscaling = client.AutoscalingV2Api(api)
        self.view: dict[str, Any] | None = None  # the last look, for `graystack status`

    def look(self, spec: RolloutSpec, state: RolloutState, routing: Routing, now: float) -> CapacityGate:
        """Scale every configured variant for the live `routing` and, near the end of the
        hold, `state`'s next stage; whether the candidate's pods for the next stage are ready."""
        try:
            baseline, candidate = roles(spec)
        except SpecError as error:  # no baseline: no roles to size (the guard is off for it too)
            self.view = {"variants": {}, "problems": {"spec": str(error)}}
            return CapacityGate(False, str(error), self.settings.ready_timeout)
        sizing = capacity_plan(self.settings, spec, state, routing, now, baseline, candidate)
        problems, pods = {}, {}
        for name, replicas in sizing.replicas.items():
            variant = self.settings.variants[name]
            try:
                deployment = call_json(
                    self._apps.read_namespaced_deployment, variant.deployment, self.namespace
                )
                self._scale(variant, deployment, replicas)
                pods[name] = pods_of(deployment)
            except Exception as error:  # the API server's answer or its absence: hold, log, look again
                problems[name] = why(error)
                log.warning("cannot scale or count %s's pods (%d wanted): %s", name, replicas, problems[name])
        self.view = capacity_view(self.settings, sizing, pods, routing.weights, candidate, problems)
        timeout = self.settings.ready_timeout
        if candidate not in sizing.replicas:
            return CapacityGate(True, f"{candidate} is not scaled here", timeout)
        ready = self.view["candidate_ready"]
        return gate(candidate, sizing.candidate_needs, ready, timeout, problems.get(candidate, ""))

    def _scale(self, variant: VariantCapacity, deployment: dict[str, Any], replicas: int) -> None:
        """`replicas` to the variant's HPA's minReplicas, else to its Deployment (as just read) through
        the scale subresource; written only where it differs."""
        if variant.hpa:
            hpa = call_json(
                self._autoscaling.read_namespaced_horizontal_pod_autoscaler, variant.hpa, self.namespace
            )
            if replicas > hpa["spec"]["maxReplicas"]:  # the API server would refuse min above max
                raise CapacityError(
                    f"HPA {variant.hpa} allows at most {hpa['spec']['maxReplicas']} replicas, the split needs {replicas}"
                )
            if hpa["spec"].get("minReplicas") != replicas:
                self._patch(
                    self._autoscaling.patch_namespaced_horizontal_pod_autoscaler,
                    variant.hpa,
                    {"spec": {"minReplicas": replicas}},
                )
            return
        if deployment["spec"].get("replicas", 1) != replicas:  # the API server's default: 1
            self._patch(
                self._apps.patch_namespaced_deployment_scale,
                variant.deployment,
                {"spec": {"replicas": replicas}},
            )

    def _patch(self, method: Callable[..., Any], name: str, body: dict[str, Any]) -> None:
        log.info("capacity: %s %s -> %s", method.__name__, name, body["spec"])
        call_json(method, name, self.namespace, body, _content_type=MERGE_PATCH)


def pods_of(deployment: dict[str, Any]) -> Pods:
    """The Deployment's pods as its status counts them."""
    status = deployment.get("status", {})
    return Pods(int(status.get("replicas") or 0), int(status.get("readyReplicas") or 0))
