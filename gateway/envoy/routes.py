"""The route configuration: only the inference API's paths reach the variants.

    POST /v1/messages, /v1/messages/count_tokens, /v1/chat/completions, /v1/completions
        header rules first, each its own split; then the weighted default split
    GET /v1/models
        the baseline's endpoints, through a cluster of their own (`<baseline>-models`)
    anything else (/metrics, /admin/*, /healthz, /readyz, /health, other methods)
        no route: Envoy's 404, in the API's error JSON (gateway/envoy/local_replies.py)

The model servers' `/metrics`, `/admin/*` and health routes are for the cluster (Prometheus, the probes,
Envoy's health checks reach the pods directly), not for clients.

`/v1/models` is not split: a client calls it to learn the model's name, often before every session, and
each answer counted on a variant's cluster would dilute that variant's error rate in the analysis (the
`direct` provider reads the clusters' attempts, gateway/metrics/direct.py). Its own cluster keeps it out
of every count the rollout reads; the baseline answers it (`retries.fallback`, else the variant named
`baseline`, else the first), being the variant that serves when all else fails.
"""

from __future__ import annotations

from collections.abc import Mapping

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.retry.priority.previous_priorities.v3 import previous_priorities_config_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from gateway import names
from gateway.envoy.affinity import hash_policies, nested_order
from gateway.envoy.common import any_proto, duration
from gateway.envoy.variant_header import served_header
from gateway.spec.model import RolloutSpec

# The POST paths split between the variants: Anthropic's Messages and OpenAI's completions.
INFERENCE_PATHS = ("/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions", "/v1/completions")
MODELS_PATH = "/v1/models"
_INFERENCE_REGEX = "^/v1/(messages(/count_tokens)?|chat/completions|completions)$"
_MODELS_RETRY_ON = "connect-failure,reset"


def models_variant(spec: RolloutSpec) -> str:
    """The variant that answers `GET /v1/models`: the baseline."""
    if spec.retries.fallback is not None:
        return spec.retries.fallback
    return "baseline" if "baseline" in spec.variants else next(iter(spec.variants))


def cluster_for(spec: RolloutSpec, variant: str) -> str:
    """The cluster a route names for `variant`: its fallback aggregate when one is configured."""
    fallback = spec.retries.fallback
    if fallback is None or variant == fallback:
        return variant
    return names.fallback_cluster(variant)


def _method(method: str) -> route_components_pb2.HeaderMatcher:
    return route_components_pb2.HeaderMatcher(
        name=":method", string_match=string_pb2.StringMatcher(exact=method)
    )


def _inference_match(*headers: route_components_pb2.HeaderMatcher) -> route_components_pb2.RouteMatch:
    """POST on one of INFERENCE_PATHS (the query string aside), and `headers`."""
    return route_components_pb2.RouteMatch(
        safe_regex=regex_pb2.RegexMatcher(regex=_INFERENCE_REGEX), headers=[_method("POST"), *headers]
    )


def _route_action(spec: RolloutSpec, split: Mapping[str, int]) -> route_components_pb2.RouteAction:
    """The split's weighted clusters, in the order that nests cohorts and picked by the affinity key's hash
    where the spec names one (gateway/envoy/affinity.py); a mirror copies the requests of a split that gives its variant
    nothing (a segment already routed to the variant is not sent to it twice)."""
    mirror = spec.routing.mirror
    mirrors = []
    if mirror is not None and mirror.percent > 0 and split.get(mirror.variant, 0) == 0:
        mirrors.append(
            route_components_pb2.RouteAction.RequestMirrorPolicy(
                cluster=names.shadow_hop_cluster(mirror.variant),  # measured on its way (shadow.py)
                runtime_fraction=base_pb2.RuntimeFractionalPercent(
                    default_value=percent_pb2.FractionalPercent(
                        numerator=mirror.percent, denominator=percent_pb2.FractionalPercent.HUNDRED
                    )
                ),
            )
        )
    affinity = spec.routing.affinity
    return route_components_pb2.RouteAction(
        request_mirror_policies=mirrors,
        hash_policy=hash_policies(affinity),
        weighted_clusters=route_components_pb2.WeightedCluster(
            clusters=[
                route_components_pb2.WeightedCluster.ClusterWeight(
                    name=cluster_for(spec, variant), weight=wrappers_pb2.UInt32Value(value=weight)
                )
                for variant, weight in nested_order(split, models_variant(spec))
            ],
            use_hash_policy=wrappers_pb2.BoolValue(value=True) if affinity else None,
        ),
        timeout=duration(spec.timeouts.request),
        retry_policy=_retry_policy(spec),
    )


def _retry_policy(spec: RolloutSpec) -> route_components_pb2.RetryPolicy:
    policy = route_components_pb2.RetryPolicy(
        retry_on=spec.retries.on,
        num_retries=wrappers_pb2.UInt32Value(value=spec.retries.attempts),
    )
    if spec.timeouts.first_byte is not None:
        # Envoy's idle timeout bounds every gap between bytes, not only the first: it means "first
        # byte" because the model servers ping a started stream while it waits for a token
        # (inference/server/keepalive.py), so only an attempt that has not answered at all is cut.
        policy.per_try_idle_timeout.CopyFrom(duration(spec.timeouts.first_byte))
    if spec.retries.fallback is not None:
        policy.retry_priority.CopyFrom(
            route_components_pb2.RetryPolicy.RetryPriority(
                name="envoy.retry_priorities.previous_priorities",
                typed_config=any_proto(
                    previous_priorities_config_pb2.PreviousPrioritiesConfig(update_frequency=1)
                ),
            )
        )
    return policy


def _segment_header(segment: str) -> base_pb2.HeaderValueOption:
    """`x-graystack-segment: <segment>` on every request a route forwards (and its mirrored copy),
    replacing any a client sent: the model servers label their latency histograms with it, so the
    rollout compares variants only on segments split at random (gateway/rollout/plan.py)."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=names.SEGMENT_HEADER, value=segment),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _models_route(spec: RolloutSpec) -> route_components_pb2.Route:
    """`GET /v1/models` to the baseline's own models cluster; a refused connection tries another pod."""
    return route_components_pb2.Route(
        name="models",
        match=route_components_pb2.RouteMatch(path=MODELS_PATH, headers=[_method("GET")]),
        route=route_components_pb2.RouteAction(
            cluster=names.models_cluster(models_variant(spec)),
            timeout=duration(spec.timeouts.request),
            retry_policy=route_components_pb2.RetryPolicy(
                retry_on=_MODELS_RETRY_ON, num_retries=wrappers_pb2.UInt32Value(value=spec.retries.attempts)
            ),
        ),
    )


def build_route_config(spec: RolloutSpec) -> route_pb2.RouteConfiguration:
    """`GET /v1/models`; then, on the inference paths, exact-match header rules first, each its own split,
    then the default weighted split. Nothing else is routed. Every answer names its variant."""
    header = spec.routing.header if spec.routing.body is None else names.MATCH_HEADER
    routes = [_models_route(spec)]
    routes += [
        route_components_pb2.Route(
            name=f"{header.lower()}={rule.value}",
            match=_inference_match(
                route_components_pb2.HeaderMatcher(
                    name=header, string_match=string_pb2.StringMatcher(exact=rule.value)
                )
            ),
            route=_route_action(spec, rule.split()),
            request_headers_to_add=[_segment_header(rule.value)],
        )
        for rule in spec.routing.rules
    ]
    routes.append(
        route_components_pb2.Route(
            name="default",
            match=_inference_match(),
            route=_route_action(spec, spec.routing.weights),
            request_headers_to_add=[_segment_header(names.DEFAULT_SEGMENT)],
        )
    )
    return route_pb2.RouteConfiguration(
        name=names.ROUTE_CONFIG,
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name=names.VIRTUAL_HOST,
                domains=["*"],
                routes=routes,
                response_headers_to_add=[served_header()],
            )
        ],
    )
