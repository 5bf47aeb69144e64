"""The rollout spec: the YAML a user edits to flip traffic (docs/spec-and-routing.md).

Validation lives here so that every way of changing the spec (file edit, admin API, CLI) is refused
with the same message naming the field, and the last good spec stays live.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
    model_validator,
)

from gateway.spec.affinity import AffinitySource, BodyPath
from gateway.spec.apis import PROTECTED, Apis, reaches
from gateway.spec.candidates import check_candidates
from gateway.spec.endpoint_picker import EndpointPicker, check_endpoint_picker
from gateway.spec.envoy_picker import EnvoyPicker, check_envoy_picker
from gateway.spec.evidence_gates import check_evidence_gates
from gateway.spec.fields import Duration, Percent, SpecError, SpecModel
from gateway.spec.gateway_api import GatewayApi, check_gateway_api
from gateway.spec.notifications import Notifications
from gateway.spec.strategy import Analysis, Strategy
from gateway.spec.yaml12 import load_yaml

# RFC 9110 token: what Envoy accepts as a header name.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Envoy's x-envoy-retry-on values (router filter docs).
RETRY_ON_VALUES = frozenset(
    {
        "5xx",
        "gateway-error",
        "reset",
        "reset-before-request",
        "connect-failure",
        "envoy-ratelimited",
        "retriable-4xx",
        "refused-stream",
        "retriable-status-codes",
        "retriable-headers",
        "http3-post-connect-failure",
    }
)


def _parse_endpoint(value: Any) -> tuple[str, int]:
    if not isinstance(value, str):
        raise ValueError("an endpoint is a string 'IP:PORT'")
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit():
        raise ValueError(f"{value!r} is not 'IP:PORT'")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"{value!r}: Envoy's EDS takes IP addresses; use e.g. 127.0.0.1:8001, "
            "or `service:`/`port:` in Kubernetes"
        ) from None
    if not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: port out of range")
    return host, int(port)


def _format_endpoint(endpoint: tuple[str, int]) -> str:
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


Endpoint = Annotated[tuple[str, int], BeforeValidator(_parse_endpoint), PlainSerializer(_format_endpoint)]


def _check_path(path: str) -> str:
    if not path.startswith("/") or any(c.isspace() for c in path):
        raise ValueError(
            f"{path!r} is not an HTTP path; use e.g. /readyz (graystack) or /health (vLLM, llama.cpp)"
        )
    return path


HttpPath = Annotated[str, AfterValidator(_check_path)]


class VariantHealthCheck(SpecModel):
    """A variant's own health route: `path` replaces `health_check.path` (None: the spec's)."""

    path: HttpPath | None = None


# How each variant's clusters pick a pod (gateway/envoy/balancing.py). Round robin by default: under the load
# test's default mix (answers of at most 32 tokens) it gave as good a TTFT p99, and a better one near
# saturation, than least_request (bench.load_balancing); least_request passes over a pod busy with long streams.
# ring_hash and maglev: the `routing.affinity` key picks the pod, so a conversation's prefix stays in one cache.
LoadBalancing = Literal["round_robin", "least_request", "ring_hash", "maglev"]


class Variant(SpecModel):
    endpoints: list[Endpoint] | None = None
    service: str | None = None
    port: int | None = Field(default=None, gt=0, lt=65536)
    # Left out: the spec's `health_check`; `{path: /health}`: that, on the variant's own path; null: none.
    health_check: VariantHealthCheck | None = VariantHealthCheck()
    load_balancing: LoadBalancing = "round_robin"

    @model_validator(mode="after")
    def _one_source(self) -> Variant:
        if (self.endpoints is None) == (self.service is None):
            raise ValueError("give either `endpoints` or `service` (with `port`)")
        if self.endpoints is not None and not self.endpoints:
            raise ValueError("`endpoints` is empty")
        if self.service is not None and self.port is None:
            raise ValueError("`service` needs a `port`")
        return self


class HeaderRule(SpecModel):
    """Requests whose routing header equals `value` go to one variant, or split by their own weights."""

    value: str = Field(min_length=1)
    variant: str | None = None
    weights: dict[str, Percent] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> HeaderRule:
        if (self.variant is None) == (self.weights is None):
            raise ValueError("a rule takes either `variant` or `weights`")
        return self

    def split(self) -> dict[str, int]:
        if self.weights is not None:
            return dict(self.weights)
        assert self.variant is not None  # _one_target: a rule has one or the other
        return {self.variant: 100}


class Mirror(SpecModel):
    """Envoy request mirroring: a copy of `percent` of the requests that `variant` does not already
    serve goes to it as well; the client gets the routed answer, the copy's is discarded."""

    variant: str
    percent: Percent = 100


class Routing(SpecModel):
    """`body`: a JSON body field (e.g. `model`) the rules match instead of `header`, so one gateway can run a
    rollout for one model name while other names keep their own split (gateway/envoy/affinity_filter.py
    brings the field to the route); a body without it, not JSON or too large takes the default split."""

    header: str = "X-Client-Type"
    body: BodyPath | None = None
    rules: list[HeaderRule] = []
    weights: dict[str, Percent]
    mirror: Mirror | None = None
    affinity: list[AffinitySource] = []  # empty: every request split at random (gateway/spec/affinity.py)

    @model_validator(mode="after")
    def _valid(self) -> Routing:
        if not _HEADER_NAME.match(self.header):
            raise ValueError(f"header {self.header!r} is not a valid HTTP header name")
        labels = [source.label for source in self.affinity]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"affinity: {repeated} listed twice")
        seen: set[str] = set()
        for rule in self.rules:
            if rule.value in seen:
                raise ValueError(f"two rules match {self.header}: {rule.value!r}")
            seen.add(rule.value)
        return self

    @property
    def matched(self) -> str:
        """What the rules' values are compared with: the header's name, or `body:PATH`."""
        return self.header if self.body is None else f"body:{self.body}"

    def segment(self, value: str | None) -> dict[str, int]:
        """The split for one header value (None: the default split)."""
        if value is None:
            return dict(self.weights)
        for rule in self.rules:
            if rule.value == value:
                return rule.split()
        raise SpecError(f"routing.rules: no rule for {self.header}: {value!r}")


class Timeouts(SpecModel):
    request: Duration = 0.0  # 0 = none: Envoy's 15 s default would cut long streams
    first_byte: Duration | None = None


class Retries(SpecModel):
    on: str = "5xx,reset,connect-failure"
    attempts: int = Field(default=1, ge=0, le=10)
    fallback: str | None = None

    @model_validator(mode="after")
    def _known_conditions(self) -> Retries:
        unknown = sorted({c.strip() for c in self.on.split(",")} - RETRY_ON_VALUES)
        if unknown:
            raise ValueError(f"unknown retry condition(s) {unknown}; Envoy knows {sorted(RETRY_ON_VALUES)}")
        return self


class HealthCheck(SpecModel):
    path: HttpPath = "/readyz"
    interval: Duration = 2.0
    timeout: Duration = 1.0
    unhealthy_threshold: int = Field(default=2, ge=1)
    healthy_threshold: int = Field(default=1, ge=1)


class OutlierDetection(SpecModel):
    consecutive_5xx: int = Field(default=5, ge=1)
    interval: Duration = 5.0
    base_ejection_time: Duration = 30.0


class RolloutSpec(SpecModel):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    variants: dict[str, Variant]
    routing: Routing
    timeouts: Timeouts = Timeouts()
    retries: Retries = Retries()
    health_check: HealthCheck | None = HealthCheck()  # None: no active health checks, unless a variant asks
    outlier_detection: OutlierDetection | None = OutlierDetection()
    strategy: Strategy | None = None
    analysis: Analysis = Analysis()
    apis: Apis = Apis()
    notifications: Notifications = Notifications()  # where the rollout's events go (gateway/notify/)
    gateway_api: GatewayApi | None = None  # the user's own gateway's routes instead of graystack's Envoy
    endpoint_picker: EndpointPicker | None = None  # graystack picks the pods of a GIE InferencePool
    envoy_picker: EnvoyPicker | None = None  # graystack's own Envoy asks a picker for each variant's pod

    @model_validator(mode="after")
    def _consistent(self) -> RolloutSpec:
        if len(self.variants) < 2:
            raise ValueError("variants: name at least two (a baseline and a candidate)")
        for name in self.variants:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
                raise ValueError(f"variants: {name!r} must be lowercase letters, digits and '-'")
        for name, variant in self.variants.items():
            if variant.load_balancing in ("ring_hash", "maglev") and not self.routing.affinity:
                raise ValueError(
                    f"variants.{name}.load_balancing: {variant.load_balancing} hashes the routing.affinity "
                    "key; name one (e.g. affinity: [{header: x-user-id}]) or use round_robin"
                )
        _check_split("routing.weights", self.routing.weights, self.variants)
        for i, rule in enumerate(self.routing.rules):
            _check_split(f"routing.rules.{i}", rule.split(), self.variants)
        mirror = self.routing.mirror
        if mirror is not None and mirror.variant not in self.variants:
            raise ValueError(f"routing.mirror.variant: unknown variant {mirror.variant!r}")
        if self.retries.fallback is not None and self.retries.fallback not in self.variants:
            raise ValueError(f"retries.fallback: unknown variant {self.retries.fallback!r}")
        if self.timeouts.first_byte is not None and self.timeouts.first_byte == 0:
            raise ValueError("timeouts.first_byte: must be above 0 (omit it for none)")
        check_evidence_gates(self.strategy, self.analysis)
        if self.strategy is not None and self.strategy.experiment is not None:
            self.strategy.experiment.check_split(list(self.variants), self.baseline)
        check_gateway_api(
            self.gateway_api,
            self.variants,
            bool(self.routing.affinity),
            self.routing.body is not None,
            shadow=self.routing.mirror is not None
            or (self.strategy is not None and self.strategy.shadow is not None),
            latency_from_answers=self.analysis.latency_source == "answers"
            and (self.analysis.max_latency_ratio is not None or self.analysis.max_ttft_p95 is not None),
        )
        check_endpoint_picker(
            self.endpoint_picker,
            self.variants,
            self.routing.body is not None,
            self.baseline,
        )
        check_envoy_picker(self.envoy_picker, self.users_gateway, self.retries.fallback)
        users = "gateway_api" if self.gateway_api else "endpoint_picker" if self.endpoint_picker else None
        check_candidates(self.strategy, self.candidates, self.variants, users)
        for entry in self.apis.table():
            for path in self.protected_paths():
                if reaches(entry.path, path):
                    raise ValueError(
                        f"apis.routes: {entry.key!r} would reach the health-check path {path}, which the "
                        "gateway never serves; refuse that entry or check health on another path"
                    )
        return self

    @property
    def baseline(self) -> str | None:
        """The baseline: `retries.fallback`, else the variant named `baseline` (None: the spec has none)."""
        return self.retries.fallback or ("baseline" if "baseline" in self.variants else None)

    @property
    def candidates(self) -> list[str]:
        """Every variant but the baseline, in the spec's order ([] without a baseline)."""
        baseline = self.baseline
        return [] if baseline is None else [v for v in self.variants if v != baseline]

    @property
    def lanes(self) -> tuple[str, ...]:
        """The candidates rolled out side by side, each in a lane of its own (gateway/rollout/candidates.py):
        several under a strategy; () for one candidate, or for none to roll out."""
        candidates = self.candidates
        return tuple(candidates) if self.strategy is not None and len(candidates) > 1 else ()

    def protected_paths(self) -> tuple[str, ...]:
        """The servers' own routes the listener never serves (apis.PROTECTED), with the health-check paths."""
        health = (self.health_check_for(variant) for variant in self.variants)
        return tuple(dict.fromkeys([*PROTECTED, *(hc.path for hc in health if hc is not None)]))

    def health_check_for(self, variant: str) -> HealthCheck | None:
        """The active health check Envoy runs on `variant`'s hosts, or None for none: a variant's own
        `health_check` path over the spec's (or over the defaults, where the spec's is null)."""
        own = self.variants[variant].health_check
        if own is None:
            return None
        if own.path is None:
            return self.health_check
        return (self.health_check or HealthCheck()).model_copy(update={"path": own.path})

    def with_split(self, weights: Mapping[str, int], segment: str | None = None) -> RolloutSpec:
        """A copy whose default split (or one segment's) is `weights`, validated like a file edit."""
        data = self.model_dump(mode="python")
        if segment is None:
            data["routing"]["weights"] = dict(weights)
        else:
            rules = data["routing"]["rules"]
            index = next((i for i, r in enumerate(rules) if r["value"] == segment), None)
            if index is None:
                raise SpecError(f"routing.rules: no rule for {self.routing.header}: {segment!r}")
            rules[index] = {"value": segment, "weights": dict(weights)}
        return validate_spec(data)

    @property
    def users_gateway(self) -> bool:
        """The user's own gateway serves the rollout (its routes, or the pool graystack picks for): its
        access log brings the answers, and no Envoy of graystack's counts the requests."""
        return self.gateway_api is not None or self.endpoint_picker is not None

    def with_mirror(self, mirror: Mirror | None) -> RolloutSpec:
        """A copy that mirrors as `mirror` says (None: no mirroring)."""
        data = self.model_dump(mode="python")
        data["routing"]["mirror"] = None if mirror is None else mirror.model_dump()
        return validate_spec(data)


def _check_split(where: str, weights: Mapping[str, int], variants: Mapping[str, Variant]) -> None:
    unknown = sorted(set(weights) - set(variants))
    if unknown:
        raise ValueError(f"{where}: unknown variant(s) {unknown}; the spec defines {sorted(variants)}")
    total = sum(weights.values())
    if total != 100:
        raise ValueError(f"{where}: weights must sum to 100, got {total}")


def complete_split(variants: list[str], partial: Mapping[str, int]) -> dict[str, int]:
    """`{zero-layer: 20}` with two variants means `{baseline: 80, zero-layer: 20}`.

    A split may leave out exactly one variant, which takes the remainder; any other left out get 0.
    """
    unknown = sorted(set(partial) - set(variants))
    if unknown:
        raise SpecError(f"weights: unknown variant(s) {unknown}; the spec defines {sorted(variants)}")
    missing = [v for v in variants if v not in partial]
    split = {v: int(partial.get(v, 0)) for v in variants}
    given = sum(partial.values())
    if len(missing) == 1 and 0 <= given <= 100:
        split[missing[0]] = 100 - given
    return split


def _format(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def validate_spec(data: Any) -> RolloutSpec:
    """A RolloutSpec from plain data, or SpecError naming each bad field."""
    if not isinstance(data, dict):
        raise SpecError("spec: expected a mapping at the top level")
    try:
        return RolloutSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError(_format(error)) from None


def parse_spec(text: str, source: str = "spec") -> RolloutSpec:
    try:
        data = load_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError(f"{source}: not valid YAML{where}: {problem}") from None
    try:
        return validate_spec(data)
    except SpecError as error:
        raise SpecError(f"{source}: {error}") from None
