"""The spec's `endpoint_picker` (issue 37): graystack answers a GIE gateway's Endpoint Picker calls for
one InferencePool (gateway/epp/), from the gateway process, so a step or a rollback reaches its next
pick at once. Each variant is the pool's pods whose `variant_label` has the variant's value (`values`
maps a variant to its label value where they differ: the variants are named otherwise than the pods).
Within a variant the pods are ranked by `scorers`, weighted (gateway/epp/scorers.py), three of them from
each pod's own metrics, read in the background as `metrics` says (gateway/epp/metrics_reader.py), and
`prefix` from an index of the prompts' blocks the picker keeps, bounded as `prefix` says
(gateway/epp/prefix.py).
A variant named in `models` is no set of pods but a model name (a LoRA adapter, a model the same server
also serves): its requests' JSON `model` is rewritten to that name and they go to the baseline's pods
(gateway/epp/service.py); it has no label value.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from gateway.spec.fields import PositiveDuration, SpecModel
from gateway.spec.gateway_api import DNS_LABEL, DNS_SUBDOMAIN

LABEL = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


# The scorers there are, each with its default weight. The load scorers weigh alike: no one of them is
# known to matter more in general (a pod's queue and its KV cache each count as much as the picker's own
# in-flight count), and a cohort's last pod as much again.
# `prefix` 2: llm-d's default profile weighs prefix 3 : queue 2 : kv 2, a full prefix hit worth 3/4 of
# the load scorers together; ours are three at 1 (in_flight, queue, kv_cache), so the same share is 2.25,
# taken down to 2: a pod holding the whole prompt wins unless it is worse than another by two thirds of
# the load range, so a hot conversation still spills off an overloaded pod. It holds every request's
# headers' answer until its body is read (gateway/epp/service.py): the price of scoring on the prompt.
# `lora` 0: only a pool that serves LoRA adapters exports `vllm:lora_requests_info`; elsewhere every pod
# would fall back to its in-flight count, weighing load above the split argued here. Turn it on (llm-d's
# KServe profile gives it 4) where the pods serve adapters.
# `prefill` 0: on the bench's stand-in engines (one prefill at a time) weight 8 beside these cut p90 TTFT
# at 80 % of saturation by a third and p99 at 95 % by 26-30 %, but p99 at 80 % stayed within the runs'
# noise, and those engines prefill exactly as the estimate assumes; real servers (chunked prefill beside
# decode) are unmeasured, and at 8 it outweighs the load scorers' balance argued above
# (BENCHMARKS.md, issue 37). Turn it on where one long prompt holds up the first tokens behind it.
SCORERS: dict[str, float] = {
    "in_flight": 1.0,
    "queue": 1.0,
    "kv_cache": 1.0,
    "session": 1.0,
    "prefix": 2.0,
    "lora": 0.0,
    "prefill": 0.0,
}


class Metrics(SpecModel):
    """Where and how often each pod's Prometheus metrics are read: `port` None is the endpoint's own."""

    path: str = Field(default="/metrics", pattern=r"^/")
    port: int | None = Field(default=None, ge=1, le=65535)
    interval: PositiveDuration = 1.0
    timeout: PositiveDuration = 0.5


class Prefix(SpecModel):
    """The prefix index's bound: prompts cut into `block_bytes` blocks (64 bytes, about llm-d's 16 tokens),
    at most `max_blocks` of a request's leading ones hashed (llm-d's 256: 16 KiB here), and `blocks` block
    hashes remembered over the pool, the least recently used forgotten first (131072: 8 MiB of prompts,
    about 2M tokens, some 25 MB of the picker's memory)."""

    block_bytes: int = Field(default=64, ge=1, le=1 << 20)
    max_blocks: int = Field(default=256, ge=1, le=1 << 16)
    blocks: int = Field(default=1 << 17, ge=1, le=1 << 24)


class Scoring(SpecModel):
    """How a picker that the gateway serves ranks a variant's pods: the scorers' weights over SCORERS'
    defaults and where each pod's metrics are read; one shape for `endpoint_picker` and `envoy_picker`."""

    scorers: dict[str, float] = {}  # over SCORERS' defaults: a scorer not named keeps its default
    metrics: Metrics = Metrics()

    def weights(self) -> dict[str, float]:
        """Every scorer's weight: the spec's where it names one, else the default (0 turns one off)."""
        return {**SCORERS, **self.scorers}


def check_scoring(field: str, scoring: Scoring) -> None:
    """ValueError naming `field`'s scorer or metrics setting that a picker cannot use."""
    unknown = sorted(set(scoring.scorers) - set(SCORERS))
    if unknown:
        raise ValueError(f"{field}.scorers: unknown scorer(s) {unknown}; known: {sorted(SCORERS)}")
    if any(weight < 0 for weight in scoring.scorers.values()):
        raise ValueError(f"{field}.scorers: a weight is negative")
    if scoring.metrics.timeout > scoring.metrics.interval:
        raise ValueError(f"{field}.metrics: the timeout is longer than the interval")


class EndpointPicker(Scoring):
    pool: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str = Field(default="default", pattern=DNS_LABEL)
    variant_label: str = Field(default="graystack.io/variant", pattern=LABEL)
    values: dict[str, str] = {}
    models: dict[str, str] = {}  # a model variant: its model name, served by the baseline's pods
    prefix: Prefix = Prefix()

    def value_of(self, variant: str) -> str:
        """The label value that marks `variant`'s pods."""
        return self.values.get(variant, variant)


def check_endpoint_picker(
    picker: EndpointPicker | None, variants: Mapping[str, object], body: bool, baseline: str | None = None
) -> None:
    """ValueError naming the field where the spec asks the picker for what it cannot do."""
    if picker is None:
        return
    unknown = sorted(set(picker.values) - set(variants))
    if unknown:
        raise ValueError(f"endpoint_picker.values: unknown variant(s) {unknown}")
    unknown = sorted(set(picker.models) - set(variants))
    if unknown:
        raise ValueError(f"endpoint_picker.models: unknown variant(s) {unknown}")
    both = sorted(set(picker.models) & set(picker.values))
    if both:
        raise ValueError(
            f"endpoint_picker.models: {both} also given a label value in endpoint_picker.values; a model "
            "variant is served by the baseline's pods and has none"
        )
    empty = sorted(variant for variant, name in picker.models.items() if not name.strip())
    if empty:
        raise ValueError(f"endpoint_picker.models: an empty model name for {empty}")
    if baseline is not None and baseline in picker.models:
        raise ValueError(
            f"endpoint_picker.models: the baseline {baseline!r} serves the model variants on its pods; "
            "it cannot be one"
        )
    check_scoring("endpoint_picker", picker)
    marks = [picker.value_of(v) for v in variants if v not in picker.models]
    if len(set(marks)) < len(marks):
        raise ValueError("endpoint_picker.values: two variants share a label value")
    if body:
        raise ValueError("routing.body: the picker decides on the request's headers; match a header instead")
