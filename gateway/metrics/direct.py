"""The `direct` provider: scrape Envoy's admin stats and the pods' /metrics, no Prometheus server needed.

Each `observe()` scrapes every target once and reports each cumulative series it read as it stands,
one `CounterKey` per series (source: the series' metric and labels, with the target's URL as its
`instance`, so two pods' series stay apart and a restarted pod's series is the same one, fallen).
The analysis takes increments between looks; this keeps no state.

Where each counter comes from, and why:

requests, errors: Envoy, per attempt. Not the model servers' `graystack_requests_total`: it also
  counts the probes' synthetic requests, which go to the pod directly, and it cannot count what never
  reached the server or never finished (a crashed pod, refused connections, a stall cut by Envoy's
  first-byte timeout). With `retries.fallback`, a variant is routed through the aggregate cluster
  `<variant>-with-fallback`, and a failed attempt retried on the baseline reaches the client as a
  200 charged to the aggregate (docs/spec-and-routing.md, "How failures behave"): reading final response
  codes alone shows 0 % errors for a variant that fails every request. So, for a variant:
    requests = upstream_rq_total{cluster=<variant>}                 attempts that reached it
             + upstream_rq_pending_failure_eject{cluster=<variant>} attempts whose connection failed
    errors   = upstream_rq_retry{cluster=<route cluster>}           failed attempts that were retried
             + upstream_rq{cluster=<route cluster>, code=~5..}      failures that reached the client
  where the route cluster is the aggregate (or the variant itself without a fallback, and for the
  fallback variant). `upstream_rq_retry` rather than `retry_upstream_rq{code=~5..}`: the latter only
  has attempts that got a response code, so a connection refused or a stall cut by the per-try
  timeout, both retried, would not count (checked against Envoy 1.40 on loopback).
  With a fallback and one retry (`retries.attempts: 1`, the default), each failed attempt is charged
  once, to the variant that made it (issue 38: the comparison that tells a shared incident from the
  candidate's reads these counts, and a failure charged to the wrong side is evidence against it):
    errors(variant)   = upstream_rq_retry_success{cluster=<aggregate>}     its failures a fallback rescued
                      + upstream_rq{cluster=<aggregate>, code=~5..}       failures that reached the client
                                                                          (its own, after a failed fallback)
    errors(fallback) += upstream_rq_retry_limit_exceeded{cluster=<aggregate>}  each fallback that failed
  A fallback's attempt lands in the fallback's own attempts (upstream_rq_total), so it gets the failures
  of those too. A retry counts as a success when its answer would not be retried: a fallback that fails
  with a code outside `retries.on` is charged to the variant. With more retries a request's attempts
  alternate between the two, and the first formula above holds instead: a failed fallback is charged to
  the variant too (its final 5xx), and the analysis caps errors at requests.

  Mirrored copies (the shadow phase) go to the cluster `<variant>-shadow` and are never retried; a
  copy whose connection failed is counted both as refused and as a 503 (checked against Envoy 1.40):
    requests += upstream_rq_total{cluster=<variant>-shadow} + upstream_rq_pending_failure_eject{...}
    errors   += upstream_rq{cluster=<variant>-shadow, code=~5..}
  Each term's series is its own entry under the same signal: the consumer sums their increments.

ttft, ttft_sum: the model servers' TTFT histogram, buckets and sum, per `segment` and
  `prompt_bucket` (the stratum) and pod (Envoy cannot see a first token): graystack's
  `graystack_request_ttft_seconds`, vLLM's `vllm:time_to_first_token_seconds`, or the histogram
  the spec names (`provider.histograms.ttft`). A server's series without a segment label (vLLM's)
  fall in the unlabelled stratum, compared only where every routed request is split at random.
  The probes' `graystack_probe_ttft_seconds` too, in a stratum of its own (spec/queries.py's PROBED): the
  analysis compares it only where the servers export no TTFT histogram.
itl, itl_sum: their histogram of each request's mean time per output token likewise
  (`graystack_request_time_per_output_token_seconds`, `vllm:request_time_per_output_token_seconds`, or
  `provider.histograms.itl`; stratum: its `segment`). One observation per request, not per token: the
  gateway routes requests at random, so a request is the unit the comparison can count as independent.

Targets: a plain URL's series carry their own `variant` label (graystack's servers and probes); a
`NAME=URL` target's series are all variant NAME's, whatever the server labels them (a vLLM or
llama.cpp pod knows nothing of the rollout's names).

compared, differed: the candidate's `graystack_shadow_comparisons_total` (agree + differ, and differ):
  its shadow copies' greedy answers against the baseline's (inference/server/outputs.py).

weight_status: each probe's `graystack_probe_weight_status` series whose value is 1.

mismatches: each probe's `graystack_probe_server_mismatch` series whose value is 1, by its `reason`:
  the probe found that its server did not load the checkpoint it reads (probes/loaded.py).

effective_windows: each model server's `graystack_model_info` (value 1), read by its `effective_window`
  label: the distance past which the bias it serves is zero.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway import names, outbound
from gateway.errors import Unreachable
from gateway.families import (
    ENVOY_UPSTREAM_RQ,
    ENVOY_UPSTREAM_RQ_PENDING_FAILURE_EJECT,
    ENVOY_UPSTREAM_RQ_RETRY,
    ENVOY_UPSTREAM_RQ_RETRY_LIMIT_EXCEEDED,
    ENVOY_UPSTREAM_RQ_RETRY_SUCCESS,
)
from gateway.metrics.observations import (
    COMPARED,
    DIFFERED,
    ERRORS,
    GENERATED,
    ITL,
    ITL_SUM,
    REQUESTS,
    TTFT,
    TTFT_SUM,
    CounterKey,
    Observations,
)
from gateway.metrics.series import charged_once, counter_key, fallback_routes, route_cluster
from gateway.spec.queries import PROBED, LatencySignal
from inference.families import (
    MODEL_INFO,
    PROBE_SERVER_MISMATCH,
    PROBE_TTFT,
    PROBE_WEIGHT_STATUS,
    REQUEST_TIME_PER_OUTPUT_TOKEN,
    REQUEST_TTFT,
    SHADOW_COMPARISONS,
    TOKENS,
    VLLM_GENERATION_TOKENS,
    VLLM_TIME_PER_OUTPUT_TOKEN,
    VLLM_TTFT,
)

# Sample names as prometheus_client's parser gives them: it appends `_total` to counters, so Envoy's
# `envoy_cluster_upstream_rq{envoy_response_code}` and `envoy_cluster_upstream_rq_total` come out with
# the same name, told apart by the response-code label.
UPSTREAM_RQ = f"{ENVOY_UPSTREAM_RQ}_total"
PENDING_FAILURE_EJECT = f"{ENVOY_UPSTREAM_RQ_PENDING_FAILURE_EJECT}_total"
RETRIES = f"{ENVOY_UPSTREAM_RQ_RETRY}_total"
RESCUED = f"{ENVOY_UPSTREAM_RQ_RETRY_SUCCESS}_total"
FALLBACKS_FAILED = f"{ENVOY_UPSTREAM_RQ_RETRY_LIMIT_EXCEEDED}_total"
# Latency histograms by their base name: graystack's servers', then vLLM's.
TTFT_HISTOGRAMS = (REQUEST_TTFT, VLLM_TTFT)
# ITL: each request's mean gap, one observation per request (per token would count one routed request
# as dozens of independent ones, gateway/rollout/evidence.py).
ITL_HISTOGRAMS = (REQUEST_TIME_PER_OUTPUT_TOKEN, VLLM_TIME_PER_OUTPUT_TOKEN)
# Envoy's admin filters by stat name before tags are extracted: only the stats read below, which cuts the
# page from ~150 KB (~30 ms to parse on the controller's event loop, every interval) to a few KB.
ENVOY_FILTER = (
    r"^cluster\..+\.upstream_rq_(total|retry|retry_success|retry_limit_exceeded|pending_failure_eject|5\d\d)$"
)
COUNTERS = frozenset(
    {
        UPSTREAM_RQ,
        PENDING_FAILURE_EJECT,
        RETRIES,
        RESCUED,
        FALLBACKS_FAILED,
        SHADOW_COMPARISONS,
        PROBE_WEIGHT_STATUS,
        PROBE_SERVER_MISMATCH,
        MODEL_INFO,
        TOKENS,
        VLLM_GENERATION_TOKENS,
    }
)

CLUSTER = "envoy_cluster_name"
CODE = "envoy_response_code"
INSTANCE = "instance"  # added to every series, as Prometheus does, so two pods' series stay apart

Sample = tuple[str, dict[str, str], float]  # a series' name, labels (its target's URL as `instance`), value
Matcher = Mapping[str, re.Pattern[str]]  # label -> what its whole value must match ("" matches an absent one)


class ScrapeError(Unreachable):
    """A target that did not answer with metrics; the message names it."""


def parse_target(target: str) -> tuple[str | None, str]:
    """(variant, URL) of a metrics target: `NAME=URL` names the variant its series belong to; a plain
    URL's series name their own."""
    name, sep, url = target.partition("=")
    if sep and name and "/" not in name and ":" not in name:
        return name, url
    return None, target


class DirectProvider:
    def __init__(
        self,
        envoy_admin: str | None,
        pods: Sequence[str],
        variants: Sequence[str],
        fallback: str | None,
        timeout: float = 2.0,
        histograms: Mapping[LatencySignal, str] | None = None,
        attempts: int = 1,
    ) -> None:
        """`envoy_admin`: Envoy's admin base URL (None: no Envoy of graystack's: on the user's gateway the
        requests are its answers, gateway/metrics/answered.py); `pods`: the /metrics URLs of the model servers and
        probes (`NAME=URL`: every series there is variant NAME's); `variants`, `fallback`: as in the
        rollout spec (they name Envoy's clusters); `timeout`: seconds allowed for each target's whole
        scrape; `histograms`: the spec's TTFT and ITL histogram names (`ttft`, `itl`), read instead
        of graystack's and vLLM's; `attempts`: the spec's `retries.attempts` (with one, each failed
        attempt is charged once, to the variant that made it)."""
        self.envoy_url = f"{envoy_admin.rstrip('/')}/stats/prometheus" if envoy_admin else None
        self.pods = [parse_target(pod) for pod in pods]
        self.variants = list(variants)
        self.fallback = fallback
        self.attempts = attempts
        self.timeout = timeout
        named = histograms or {}
        self.latency = {
            TTFT: (named["ttft"],) if "ttft" in named else TTFT_HISTOGRAMS,
            ITL: (named["itl"],) if "itl" in named else ITL_HISTOGRAMS,
        }
        self.wanted = COUNTERS | {
            f"{base}{suffix}"
            for base in (*self.latency[TTFT], *self.latency[ITL], PROBE_TTFT)
            for suffix in ("_bucket", "_sum")
        }

    def new_count(self) -> None:
        """Nothing is kept between looks."""

    def close(self) -> None:
        """Nothing runs in the background: each look opens and closes its own client."""

    async def observe(self) -> Observations:
        envoy = [(None, self.envoy_url, {"filter": ENVOY_FILTER})] if self.envoy_url else []
        targets = [*envoy, *((v, url, {}) for v, url in self.pods)]
        async with httpx.AsyncClient(timeout=self.timeout, verify=outbound.tls()) as client:
            scrapes = await asyncio.gather(
                *(self._scrape(client, url, params, variant) for variant, url, params in targets),
                return_exceptions=True,
            )
        failures = [str(result) for result in scrapes if isinstance(result, ScrapeError)]
        if failures:
            return Observations(error="; ".join(failures))
        samples: list[Sample] = []
        for result in scrapes:
            if isinstance(result, BaseException):
                raise result
            samples.extend(result)
        try:
            counters = {key: value for v in self.variants for key, value in self._counters(v, samples)}
        except ValueError as error:
            return Observations(error=f"unreadable series {error}")
        return Observations(
            counters=counters,
            weight_status=_by_instance(samples, PROBE_WEIGHT_STATUS, "status"),
            effective_windows={
                variant: [int(window) for window in windows]
                for variant, windows in _by_instance(samples, MODEL_INFO, "effective_window").items()
            },
            mismatches=_by_instance(samples, PROBE_SERVER_MISMATCH, "reason"),
        )

    async def _scrape(
        self, client: httpx.AsyncClient, url: str, params: Mapping[str, str], variant: str | None
    ) -> list[Sample]:
        try:
            async with asyncio.timeout(self.timeout):
                response = await client.get(url, params=params)
            response.raise_for_status()
            families = list(text_string_to_metric_families(response.text))
        except TimeoutError:
            raise ScrapeError(f"scrape of {url} timed out after {self.timeout}s") from None
        except Exception as error:  # whatever a target answers, the controller must not crash on it
            raise ScrapeError(f"scrape of {url} failed: {error!r}") from error
        own = {"variant": variant} if variant is not None else {}
        return [
            (sample.name, {**sample.labels, **own, INSTANCE: url}, sample.value)
            for family in families
            for sample in family.samples
            if sample.name in self.wanted
        ]

    def _counters(self, variant: str, samples: Sequence[Sample]) -> list[tuple[CounterKey, float]]:
        """`variant`'s series, each keyed by its signal (the module docstring's terms)."""
        rules = self._rules(variant)
        return [
            (counter_key(variant, signal, name, {**labels, **stratum}), value)
            for name, labels, value in samples
            for signal, wanted, matcher, stratum in rules
            if name == wanted and all(p.fullmatch(labels.get(label, "")) for label, p in matcher.items())
        ]

    def _rules(self, variant: str) -> list[tuple[str, str, Matcher, dict[str, str]]]:
        """(signal, sample name, label matcher, labels set on its series) of each term counted for
        `variant`."""
        route, shadow = route_cluster(variant, self.fallback), names.shadow_cluster(variant)
        own, answered = _one_of(variant, shadow), _one_of(route, shadow)
        of_variant = {"variant": _one_of(variant)}
        # a variant behind its fallback aggregate: its failures the fallback rescued (else: every retry)
        failed = RESCUED if charged_once(variant, self.fallback, self.attempts) else RETRIES
        aggregates = fallback_routes(variant, self.variants, self.fallback, self.attempts)
        terms = [
            (REQUESTS, UPSTREAM_RQ, {CLUSTER: own, CODE: _one_of("")}),
            (REQUESTS, PENDING_FAILURE_EJECT, {CLUSTER: own}),
            (ERRORS, failed, {CLUSTER: _one_of(route)}),
            (ERRORS, UPSTREAM_RQ, {CLUSTER: answered, CODE: re.compile(r"5\d\d")}),
            *([(ERRORS, FALLBACKS_FAILED, {CLUSTER: _one_of(*aggregates)})] if aggregates else []),
            *(
                (signal, f"{base}{suffix}", of_variant)
                for histogram, total in ((TTFT, TTFT_SUM), (ITL, ITL_SUM))
                for base in self.latency[histogram]
                for signal, suffix in ((histogram, "_bucket"), (total, "_sum"))
            ),
            (COMPARED, SHADOW_COMPARISONS, {**of_variant, "result": _one_of("agree", "differ")}),
            (DIFFERED, SHADOW_COMPARISONS, {**of_variant, "result": _one_of("differ")}),
            (GENERATED, TOKENS, {**of_variant, "kind": _one_of("generated")}),
            (GENERATED, VLLM_GENERATION_TOKENS, of_variant),
        ]
        probed = {"segment": PROBED}
        return [(*term, {}) for term in terms] + [
            (TTFT, f"{PROBE_TTFT}_bucket", of_variant, probed),
            (TTFT_SUM, f"{PROBE_TTFT}_sum", of_variant, probed),
        ]


def _one_of(*values: str) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(value) for value in values))


def _by_instance(samples: Sequence[Sample], name: str, label: str) -> dict[str, list[str]]:
    """variant -> `label` of each of its `name` series at 1 (a probe's status or mismatch, a model
    server's window), ordered by target URL."""
    reported: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for series, labels, value in samples:
        if series == name and value == 1:
            reported[labels["variant"]].append((labels[INSTANCE], labels[label]))
    return {variant: [found for _, found in sorted(pairs)] for variant, pairs in reported.items()}
