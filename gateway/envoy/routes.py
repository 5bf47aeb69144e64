"""The route configuration: only the API table's paths reach the variants (gateway/spec/apis.py).

    guards, refused and pinned entries (gateway/envoy/api_routes.py)
        the servers' /metrics, /admin/*, health routes: 404; `refuse`: 404; `baseline` (by default
        `GET /v1/models`): the baseline's endpoints, through a cluster of their own (`<baseline>-models`)
    each `split` entry (by default POST /v1/messages, /v1/messages/count_tokens, /v1/chat/completions,
    /v1/completions, /v1/responses, /v1/embeddings; GET and DELETE /v1/responses/{id})
        header rules first, each its own split; then the weighted default split
    anything else
        `apis.unknown_paths: refuse` (the default): no route, Envoy's 404 in the API's error JSON
        (gateway/envoy/local_replies.py); `baseline`: to the baseline's own cluster

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

from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.retry.priority.previous_priorities.v3 import previous_priorities_config_pb2
from envoy.type.matcher.v3 import string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from gateway import names
from gateway.envoy.affinity import hash_policies, nested_order
from gateway.envoy.api_routes import (
    baseline_variant,
    entry_match,
    fixed_routes,
    route_name,
    split_entries,
    unknown_routes,
)
from gateway.envoy.capture import capture_metadata
from gateway.envoy.common import any_proto, duration
from gateway.envoy.picking import picker_for, picker_off
from gateway.envoy.variant_header import served_headers
from gateway.spec.candidates import slots
from gateway.spec.model import Mirror, RolloutSpec


def cluster_for(spec: RolloutSpec, variant: str) -> str:
    """The cluster a route names for `variant`: its fallback aggregate when one is configured."""
    fallback = spec.retries.fallback
    if fallback is None or variant == fallback:
        return variant
    return names.fallback_cluster(variant)


def _mirrored(spec: RolloutSpec, split: Mapping[str, int]) -> int:
    """The percent of the split's requests mirrored: a mirror copies the requests the split sends to any
    other variant than its own (its own share's are not sent to it twice: MIRROR_HEADER); a split that
    sends everything to the mirror's variant copies nothing."""
    mirror = spec.routing.mirror
    if mirror is None or not any(share for variant, share in split.items() if variant != mirror.variant):
        return 0
    return mirror.percent


def _route_action(spec: RolloutSpec, split: Mapping[str, int]) -> route_components_pb2.RouteAction:
    """The split's weighted clusters, in the order that nests cohorts and picked by the affinity key's hash
    where the spec names one (gateway/envoy/affinity.py), and its mirror (`_mirrored`)."""
    mirror = spec.routing.mirror if _mirrored(spec, split) > 0 else None
    mirrors = []
    if mirror is not None:
        mirrors.append(
            route_components_pb2.RouteAction.RequestMirrorPolicy(
                # the shadow hop (measured on its way, shadow.py), named by the chosen weighted cluster
                cluster_header=names.MIRROR_HEADER,
                request_headers_mutations=[mutation_rules_pb2.HeaderMutation(remove=names.MIRROR_HEADER)],
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
                    name=cluster_for(spec, variant),
                    weight=wrappers_pb2.UInt32Value(value=weight),
                    request_headers_to_add=[
                        _overwrite(names.ROUTED_HEADER, variant),
                        *_mirror_to(mirror, variant),
                    ],
                    request_headers_to_remove=[names.MIRROR_HEADER]
                    if mirror is not None and variant == mirror.variant
                    else [],
                    typed_per_filter_config=picker_for(spec.envoy_picker, variant)
                    if spec.envoy_picker
                    else {},
                )
                for variant, weight in nested_order(split, baseline_variant(spec), _slots(spec))
            ],
            use_hash_policy=wrappers_pb2.BoolValue(value=True) if affinity else None,
        ),
        timeout=duration(spec.timeouts.request),
        retry_policy=_retry_policy(spec),
    )


def _mirror_to(mirror: Mirror | None, variant: str) -> list[base_pb2.HeaderValueOption]:
    """Where a request `variant` serves is copied to (MIRROR_HEADER): the mirror's hop, unless it is its own."""
    if mirror is None or variant == mirror.variant:
        return []
    return [_overwrite(names.MIRROR_HEADER, names.shadow_hop_cluster(mirror.variant))]


def _slots(spec: RolloutSpec) -> dict[str, int] | None:
    """Several candidates' cohort slots where clients are keyed (gateway/envoy/affinity.py); None: none."""
    return slots(spec.strategy, spec.lanes) if spec.routing.affinity else None


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


def _overwrite(header: str, value: str) -> base_pb2.HeaderValueOption:
    """`header: value` on the forwarded request, replacing any a client sent.

    On every route: `x-graystack-segment`, which the model servers label their latency histograms with, so
    the rollout compares variants only on segments split at random (gateway/rollout/plan.py). On each
    weighted cluster: `x-graystack-routed`, the variant the split chose, which the answer log carries, so an
    answer a fallback retry moved to another variant's host still counts as the chosen variant's."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=header, value=value),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _split_routes(
    spec: RolloutSpec,
    where: str,
    split: Mapping[str, int],
    segment: str,
    *headers: route_components_pb2.HeaderMatcher,
) -> list[route_components_pb2.Route]:
    """One segment's split, on each `split` entry of the API table."""
    return [
        route_components_pb2.Route(
            name=route_name(where, entry),
            match=entry_match(entry, *headers),
            route=_route_action(spec, split),
            request_headers_to_add=[_overwrite(names.SEGMENT_HEADER, segment)],
            # which answers the answer filter keeps (gateway/envoy/capture.py); none without `analysis.quality`
            metadata=capture_metadata(spec.analysis.quality, _mirrored(spec, split)),
        )
        for entry in split_entries(spec)
    ]


def build_route_config(spec: RolloutSpec) -> route_pb2.RouteConfiguration:
    """The guards, refused and pinned APIs; then, on the table's split APIs, exact-match header rules
    first, each its own split, then the default weighted split; then unknown paths. Every answer names
    its variant. Rules on a body field (`routing.body`) match the header the affinity filter writes it
    into. With an `envoy_picker`, each weighted cluster asks it for the variant's pod."""
    header = spec.routing.header if spec.routing.body is None else names.MATCH_HEADER
    routes = fixed_routes(spec)
    for rule in spec.routing.rules:
        matcher = route_components_pb2.HeaderMatcher(
            name=header, string_match=string_pb2.StringMatcher(exact=rule.value)
        )
        routes += _split_routes(spec, f"{header.lower()}={rule.value}", rule.split(), rule.value, matcher)
    routes += _split_routes(spec, names.DEFAULT_SEGMENT, spec.routing.weights, names.DEFAULT_SEGMENT)
    routes += unknown_routes(spec)
    return route_pb2.RouteConfiguration(
        name=names.ROUTE_CONFIG,
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name=names.VIRTUAL_HOST,
                domains=["*"],
                routes=routes,
                response_headers_to_add=served_headers(),
                # the picker only where a weighted cluster names the variant (gateway/envoy/picking.py)
                typed_per_filter_config=picker_off(spec.envoy_picker) if spec.envoy_picker else {},
            )
        ],
    )
