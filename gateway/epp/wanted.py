"""What the rollout wants now, as the picker reads it: plain data, so that whatever feeds it (flags, a file,
the rollout controller in the same process) only has to build one of these, and a flip is a new value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.spec.endpoint_picker import SCORERS, Prefix


@dataclass(frozen=True)
class Wanted:
    """`pods`: each variant's endpoints (`ip:port`), the pool's pods grouped by their variant label.
    `weights`: the default split. `segments`: a header value's own split (the header `segment_header`).
    `cohort_header`: a client's key; requests with one stay on one variant while the split holds (and
    move only as the split's edge moves: gateway/envoy/affinity.py's nested order). `baseline` heads
    that order. `scorers`: each scorer's weight within a variant (gateway/epp/scorers.py). `models`: the
    model variants, each with the model name its requests' bodies are rewritten to; such a variant has no
    pods of its own and is served by the baseline's (`pods_of`). `prefix`: the prefix index's bound
    (gateway/epp/prefix.py)."""

    pods: Mapping[str, tuple[str, ...]]
    weights: Mapping[str, int]
    baseline: str
    segment_header: str | None = None
    segments: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    cohort_header: str | None = None
    scorers: Mapping[str, float] = field(default_factory=lambda: dict(SCORERS))
    models: Mapping[str, str] = field(default_factory=dict)
    prefix: Prefix = Prefix()

    def __post_init__(self) -> None:
        splits = [self.weights, *self.segments.values()]
        unknown = sorted(
            {v for split in splits for v in split if v not in self.pods and v not in self.models}
        )
        if unknown:
            raise ValueError(f"a split names variants with no pods: {unknown}")
        if any(weight < 0 for split in splits for weight in split.values()):
            raise ValueError("a weight is negative")
        if self.baseline not in self.pods:
            raise ValueError(f"the baseline {self.baseline!r} has no pods")
        if self.baseline in self.models:
            raise ValueError(f"the baseline {self.baseline!r} serves the model variants; it cannot be one")
        if any(not name for name in self.models.values()):
            raise ValueError("a model variant's model name is empty")
        unknown = sorted(set(self.scorers) - set(SCORERS))
        if unknown:
            raise ValueError(f"unknown scorer(s) {unknown}; known: {sorted(SCORERS)}")
        if any(weight < 0 for weight in self.scorers.values()):
            raise ValueError("a scorer's weight is negative")

    def split_for(self, headers: Mapping[str, str]) -> Mapping[str, int]:
        """The split this request's segment takes: its own, or the default."""
        if self.segment_header is not None:
            value = headers.get(self.segment_header.lower())
            if value is not None and value in self.segments:
                return self.segments[value]
        return self.weights

    def variants(self) -> list[str]:
        """Every variant: those of pods, then the model variants."""
        return [*self.pods, *(variant for variant in self.models if variant not in self.pods)]

    def pods_of(self, variant: str) -> tuple[str, ...]:
        """The endpoints that serve `variant`: a model variant's are the baseline's."""
        return tuple(self.pods[self.baseline if variant in self.models else variant])

    def variant_of(self, endpoint: str) -> str | None:
        return next((variant for variant, pods in self.pods.items() if endpoint in pods), None)

    def answered_as(self, endpoint: str, marked: str | None) -> str | None:
        """The variant an answer served by `endpoint` counts as: its pod's; on the baseline's pods, the
        model variant the picker marked the request with, since no pod tells a model variant's answers
        from the baseline's. A mark naming a variant of pods is not taken: where an answer was served is
        what proves those (issue 36), and a client cannot move an answer by sending a mark."""
        variant = self.variant_of(endpoint)
        return marked if variant == self.baseline and marked in self.models else variant


def _pairs(text: str, what: str) -> dict[str, str]:
    """`a=1,b=2` as {"a": "1", "b": "2"}; ValueError naming `what` otherwise."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{what}: {item!r} is not NAME=VALUE")
        pairs[name] = value
    return pairs


def parse_scorers(items: list[str]) -> dict[str, float]:
    """`NAME=WEIGHT` once per scorer, over the defaults (0 turns one off)."""
    try:
        given = {name: float(weight) for name, weight in _pairs(",".join(items), "scorer").items()}
    except ValueError as error:
        raise ValueError(f"scorer: {error}") from None
    return {**SCORERS, **given}


def parse_split(text: str) -> dict[str, int]:
    """`baseline=95,zero-layer=5`."""
    try:
        return {variant: int(weight) for variant, weight in _pairs(text, "split").items()}
    except ValueError as error:
        raise ValueError(f"split {text!r}: {error}") from None


def parse_pods(items: list[str]) -> dict[str, tuple[str, ...]]:
    """`variant=ip:port,ip:port` once per variant (the endpoints after the first `=` split on commas)."""
    pods: dict[str, tuple[str, ...]] = {}
    for item in items:
        variant, sep, endpoints = item.partition("=")
        listed = tuple(filter(None, (endpoint.strip() for endpoint in endpoints.split(","))))
        if not sep or not variant or not listed:
            raise ValueError(f"pods: {item!r} is not VARIANT=IP:PORT[,IP:PORT...]")
        if any(not endpoint.rpartition(":")[2].isdigit() for endpoint in listed):
            raise ValueError(f"pods: {item!r}: each endpoint is IP:PORT")
        pods[variant] = listed
    return pods


def parse_models(items: list[str]) -> dict[str, str]:
    """`VARIANT=MODEL-NAME` once per model variant."""
    return _pairs(",".join(items), "model")


def parse_segments(items: list[str]) -> dict[str, dict[str, int]]:
    """`VALUE:variant=weight,...` once per header value with its own split."""
    segments: dict[str, dict[str, int]] = {}
    for item in items:
        value, sep, split = item.partition(":")
        if not sep or not value:
            raise ValueError(f"segment: {item!r} is not VALUE:VARIANT=WEIGHT[,...]")
        segments[value] = parse_split(split)
    return segments
