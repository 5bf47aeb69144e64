"""The spec's `gateway_api`: the rollout drives the user's own Gateway API gateway instead of graystack's
Envoy (issue 36). It names the HTTPRoute(s) and, for each variant, the backendRef that stands for it (a
Service or an InferencePool); graystack writes only those backendRefs' weights, in every rule of the
routes that has them, and header segments become rules of graystack's own (gateway/gatewayapi/).

What a Gateway API route cannot express is refused here, with the field named: affinity (a gateway draws
each request's backend at random by weight: no cohort sticks) and routing on a body field (HTTPRoute
matches paths, headers, query parameters and methods only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from gateway.spec.fields import Duration, SpecModel

CORE = ""  # a Service's group
INFERENCE = "inference.networking.k8s.io"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class BackendRef(SpecModel):
    """A variant's backend as the routes reference it: a Service (with its port) or an InferencePool."""

    kind: Literal["Service", "InferencePool"] = "Service"
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str | None = Field(default=None, pattern=DNS_LABEL)  # None: the route's own
    port: int | None = Field(default=None, ge=1, le=65535)

    @model_validator(mode="after")
    def _port_where_needed(self) -> BackendRef:
        if self.kind == "Service" and self.port is None:
            raise ValueError(f"backendRef {self.name!r}: a Service needs its port (as the route names it)")
        if self.kind == "InferencePool" and self.port is not None:
            raise ValueError(f"backendRef {self.name!r}: an InferencePool has no port (its targetPorts)")
        return self

    @property
    def group(self) -> str:
        return CORE if self.kind == "Service" else INFERENCE

    def describe(self, route_namespace: str) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.kind} {self.namespace or route_namespace}/{self.name}{port}"


class RouteRef(SpecModel):
    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str = Field(default="default", pattern=DNS_LABEL)


class ServerCounters(SpecModel):
    """Where no access log can reach graystack (a gateway that is not Envoy-based), the split is proven from
    each endpoint's own request counter, read at `path` on `port` (None: the port it serves on): `counter`,
    a counter every request the server takes increments (vLLM's `vllm:request_success_total`; graystack's
    `graystack_requests_total`), summed over its labels."""

    counter: str = Field(default="vllm:request_success_total", min_length=1)
    path: str = Field(default="/metrics", pattern=r"^/")
    port: int | None = Field(default=None, ge=1, le=65535)


class GatewayApi(SpecModel):
    """`routes`: the HTTPRoutes whose weights the rollout sets; `backends`: each variant's backendRef;
    `on_drift`: what a change of those weights by someone else (a GitOps tool reverting them) gets:
    `restore` writes them back and tells, `hold` holds the rollout and tells. `mirror`: the gateway
    implements the standard `RequestMirror` filter with a `percent` (Envoy Gateway, Istio, kgateway do;
    the conformance report of each gateway says), which a shadow stage needs. `answer_filter`: graystack's
    answer filter runs in the gateway (Envoy Gateway's EnvoyExtensionPolicy, `graystack render`); without
    it the access log gives status, duration, bytes and the upstream host only, so the latency checks
    must read the model servers' histograms (`analysis.latency_source: histograms`) or be off.
    `server_counters`: the split is proven from the endpoints' request counters instead of the access log
    (a non-Envoy gateway; what that costs: docs/spec-and-routing.md). `settle`: how long after the gateway
    reports a write Accepted its proxies are given to serve it; answers that start sooner are not counted.
    A gateway writes Accepted as it translates the route and programs its proxies after: a loaded
    reference gateway served the split before for over a second, and a 1 % canary was refuted on them."""

    routes: list[RouteRef] = Field(min_length=1)
    backends: dict[str, BackendRef]
    on_drift: Literal["restore", "hold"] = "restore"
    mirror: bool = True
    answer_filter: bool = True
    server_counters: ServerCounters | None = None
    settle: Duration = Field(default=2.0, ge=0)


def check_gateway_api(
    gateway_api: GatewayApi | None,
    variants: Mapping[str, object],
    affinity: bool,
    body: bool,
    shadow: bool = False,
    latency_from_answers: bool = False,
) -> None:
    """ValueError naming the field where the spec asks a Gateway API route for what it cannot do."""
    if gateway_api is None:
        return
    missing = sorted(set(variants) - set(gateway_api.backends))
    if missing:
        raise ValueError(f"gateway_api.backends: no backendRef for variant(s) {missing}")
    unknown = sorted(set(gateway_api.backends) - set(variants))
    if unknown:
        raise ValueError(f"gateway_api.backends: unknown variant(s) {unknown}")
    refs = [(b.kind, b.namespace, b.name, b.port) for b in gateway_api.backends.values()]
    if len(set(refs)) < len(refs):
        raise ValueError("gateway_api.backends: two variants name the same backendRef")
    if affinity:
        raise ValueError(
            "routing.affinity: a Gateway API route draws each request's backend at random by weight, so no "
            "cohort can stick; drop affinity, or route through graystack's Envoy"
        )
    if body:
        raise ValueError(
            "routing.body: an HTTPRoute matches paths, headers, query parameters and methods only"
        )
    if latency_from_answers and not gateway_api.answer_filter:
        raise ValueError(
            "analysis.latency_source: answers needs graystack's answer filter in the gateway, and "
            "gateway_api.answer_filter is false: without it the access log carries no first token; set "
            "latency_source: histograms (the model servers' own), or max_latency_ratio and max_ttft_p95 to null"
        )
    if shadow and not gateway_api.mirror:
        raise ValueError(
            "strategy.shadow (or routing.mirror): gateway_api.mirror is false, so the gateway cannot copy "
            "requests to the candidate (the RequestMirror filter with a percent); drop the shadow stage"
        )
