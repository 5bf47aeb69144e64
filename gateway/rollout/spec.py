"""The rollout spec: the YAML a user edits to flip traffic (shared/DESIGN.md, "Rollout spec").

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
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.metrics.queries import check_overrides

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
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


class SpecError(ValueError):
    """A spec that cannot go live; the message names the offending field."""


def parse_duration(value: Any) -> float:
    """Seconds from `8s`, `500ms`, `5m`, `1h`, `90d` or a bare number of seconds; refuses negatives."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 2s or 500ms")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration; use e.g. 8s, 500ms, 5m or 0")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError("expected a duration such as 2s or 500ms")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
Percent = Annotated[int, Field(ge=0, le=100)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


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


class VariantHealthCheck(_Model):
    """A variant's own health route: `path` replaces `health_check.path` (None: the spec's)."""

    path: HttpPath | None = None


class Variant(_Model):
    endpoints: list[Endpoint] | None = None
    service: str | None = None
    port: int | None = Field(default=None, gt=0, lt=65536)
    # Left out: the spec's `health_check`; `{path: /health}`: that, on the variant's own path; null: none.
    health_check: VariantHealthCheck | None = VariantHealthCheck()

    @model_validator(mode="after")
    def _one_source(self) -> Variant:
        if (self.endpoints is None) == (self.service is None):
            raise ValueError("give either `endpoints` or `service` (with `port`)")
        if self.endpoints is not None and not self.endpoints:
            raise ValueError("`endpoints` is empty")
        if self.service is not None and self.port is None:
            raise ValueError("`service` needs a `port`")
        return self


class HeaderRule(_Model):
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
        return dict(self.weights) if self.weights is not None else {self.variant: 100}


class Mirror(_Model):
    """Envoy request mirroring: a copy of `percent` of the requests that `variant` does not already
    serve goes to it as well; the client gets the routed answer, the copy's is discarded."""

    variant: str
    percent: Percent = 100


class Routing(_Model):
    header: str = "X-Client-Type"
    rules: list[HeaderRule] = []
    weights: dict[str, Percent]
    mirror: Mirror | None = None

    @model_validator(mode="after")
    def _valid(self) -> Routing:
        if not _HEADER_NAME.match(self.header):
            raise ValueError(f"header {self.header!r} is not a valid HTTP header name")
        seen: set[str] = set()
        for rule in self.rules:
            if rule.value in seen:
                raise ValueError(f"two rules match {self.header}: {rule.value!r}")
            seen.add(rule.value)
        return self

    def segment(self, value: str | None) -> dict[str, int]:
        """The split for one header value (None: the default split)."""
        if value is None:
            return dict(self.weights)
        for rule in self.rules:
            if rule.value == value:
                return rule.split()
        raise SpecError(f"routing.rules: no rule for {self.header}: {value!r}")


class Timeouts(_Model):
    request: Duration = 0.0  # 0 = none: Envoy's 15 s default would cut long streams
    first_byte: Duration | None = None


class Retries(_Model):
    on: str = "5xx,reset,connect-failure"
    attempts: int = Field(default=1, ge=0, le=10)
    fallback: str | None = None

    @model_validator(mode="after")
    def _known_conditions(self) -> Retries:
        unknown = sorted({c.strip() for c in self.on.split(",")} - RETRY_ON_VALUES)
        if unknown:
            raise ValueError(f"unknown retry condition(s) {unknown}; Envoy knows {sorted(RETRY_ON_VALUES)}")
        return self


class HealthCheck(_Model):
    path: HttpPath = "/readyz"
    interval: Duration = 2.0
    timeout: Duration = 1.0
    unhealthy_threshold: int = Field(default=2, ge=1)
    healthy_threshold: int = Field(default=1, ge=1)


class OutlierDetection(_Model):
    consecutive_5xx: int = Field(default=5, ge=1)
    interval: Duration = 5.0
    base_ejection_time: Duration = 30.0


class Gate(_Model):
    success_rate: float = Field(default=0.995, ge=0, le=1)
    max_latency_ratio: float = Field(default=1.0, gt=0)


class Shadow(_Model):
    percent: Percent = 100
    duration: Duration = 300.0
    gate: Gate = Gate()


class Step(_Model):
    weight: Percent
    hold: Duration = 0.0


class Strategy(_Model):
    shadow: Shadow | None = None
    steps: list[Step] = Field(min_length=1)


MetricName = Annotated[str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")]


class Provider(_Model):
    type: Literal["direct", "prometheus"] = "direct"
    url: str | None = None
    # PromQL replacing the prometheus provider's built-in queries by name (gateway/metrics/queries.py).
    queries: dict[str, str] | None = None
    # The servers' TTFT and inter-token histograms by base name, where they are neither graystack's nor
    # vLLM's (both providers read those by default): e.g. {ttft: my_server_ttft_seconds}.
    histograms: dict[Literal["ttft", "itl"], MetricName] | None = None

    @field_validator("queries")
    @classmethod
    def _known_queries(cls, queries: dict[str, str] | None) -> dict[str, str] | None:
        if queries is not None:
            check_overrides(queries)
        return queries

    @model_validator(mode="after")
    def _prometheus_needs_a_url(self) -> Provider:
        if self.type == "prometheus" and not self.url:
            raise ValueError("the prometheus provider needs `url`, e.g. http://prometheus:9090")
        return self


class Analysis(_Model):
    """How the guard decides (gateway/rollout/evidence.py; shared/research/sequential_analysis.md).

    Decisions are anytime-valid sequential tests over the whole rollout, so the user states how often
    the guard may be wrong, not how many requests a window holds: `false_rollback_budget` bounds the
    chance that a healthy candidate is ever rolled back by the rollout's tests (split evenly across the
    tests that run), `mean_time_between_false_alarms` bounds the change detector that guards after
    100 %, and `min_detectable_error_rate` is the smallest regression a stage must be able to catch
    before it ends (it sets each stage's minimum candidate requests). Any check is off with null.
    `window` and `min_requests` serve dashboards only; no decision reads them.
    """

    interval: Duration | None = None  # seconds between looks; None: 1 s for `direct`, 5 s for `prometheus`
    window: Duration = 60.0
    min_requests: int = Field(default=100, ge=1)
    max_error_rate: float = Field(default=0.003, gt=0, lt=1)
    false_rollback_budget: float = Field(default=0.01, gt=0, lt=0.5)
    mean_time_between_false_alarms: Duration = 90 * 86400.0
    min_detectable_error_rate: float = Field(default=0.01, gt=0, lt=1)
    # Candidate errors against the baseline's: at most this many times the baseline's rate (None: off).
    max_error_ratio: float | None = Field(default=2.0, ge=1)
    # Candidate TTFT and inter-token latency at most this many times the baseline's, in distribution
    # (None: off); tested on histogram buckets, within each prompt bucket.
    max_latency_ratio: float | None = Field(default=1.2, gt=1)
    max_ttft_p95: Duration | None = 2.0
    on_shared_incident: Literal["rollback", "hold"] = "rollback"
    expected_weight_status: list[Literal["ACTIVE", "ZEROED", "ERASED"]] | None = ["ERASED", "ZEROED"]
    # Zero-layer pods must serve a bias that is zero past this distance (their model servers'
    # graystack_model_info effective_window): tells the derived sparse ACTIVE form (64 on the trained
    # default model) from an ACTIVE bias spanning the whole context. None: not checked.
    max_effective_window: int | None = Field(default=None, ge=0)
    # The share of shadow copies whose greedy answer must equal the baseline's (inference/server/outputs.py);
    # None: not checked. Tested like the error rate, on the disagreements.
    min_shadow_agreement: float | None = Field(default=None, gt=0, lt=1)
    provider: Provider = Provider()
    # When the metrics stay unreadable past the retry limit: hold the weights and alert (freeze),
    # or treat it as a failure (rollback). Freeze is the default: an outage of the metrics source
    # is not evidence against the variant.
    on_error: Literal["freeze", "rollback"] = "freeze"

    @model_validator(mode="after")
    def _budgets_that_work(self) -> Analysis:
        if self.interval is not None and self.interval <= 0:
            raise ValueError("interval: must be above 0 (omit it for the provider's default)")
        if self.min_detectable_error_rate <= self.max_error_rate:
            raise ValueError(
                f"min_detectable_error_rate ({self.min_detectable_error_rate:g}) must be above "
                f"max_error_rate ({self.max_error_rate:g}): no test can catch a regression at its threshold"
            )
        looks = self.mean_time_between_false_alarms / self.look_interval
        if looks < 1000:
            raise ValueError(
                f"mean_time_between_false_alarms ({self.mean_time_between_false_alarms:g}s) must span at "
                f"least 1000 looks of {self.look_interval:g}s: the change detector would alarm on healthy traffic"
            )
        return self

    @property
    def look_interval(self) -> float:
        """Seconds between looks: looks cost nothing statistically, so as often as the source refreshes."""
        if self.interval is not None:
            return self.interval
        return 1.0 if self.provider.type == "direct" else 5.0


class RolloutSpec(_Model):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    variants: dict[str, Variant]
    routing: Routing
    timeouts: Timeouts = Timeouts()
    retries: Retries = Retries()
    health_check: HealthCheck | None = HealthCheck()  # None: no active health checks, unless a variant asks
    outlier_detection: OutlierDetection | None = OutlierDetection()
    strategy: Strategy | None = None
    analysis: Analysis = Analysis()

    @model_validator(mode="after")
    def _consistent(self) -> RolloutSpec:
        if len(self.variants) < 2:
            raise ValueError("variants: name at least two (a baseline and a candidate)")
        for name in self.variants:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
                raise ValueError(f"variants: {name!r} must be lowercase letters, digits and '-'")
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
        return self

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


class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. Under YAML 1.1, the contract's `retries: {on: ...}`
    key would load as the boolean True (and `off`, `yes`, `no` likewise)."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_yaml(text: str) -> Any:
    """Plain data from YAML, safely (a SafeLoader), with YAML 1.2 booleans."""
    return yaml.load(text, Loader=_Yaml12Loader)


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
