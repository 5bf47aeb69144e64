"""Names shared by the builders and by whoever reads Envoy's stats (cluster names are stat labels)."""

ROUTE_CONFIG = "graystack"
LISTENER = "graystack-ingress"
HCM_STAT_PREFIX = "ingress"
VIRTUAL_HOST = "graystack"
XDS_CLUSTER = "graystack-xds"
# The bootstrap cluster that reaches the leading gateway replica alone (the chart's leader-only Service),
# where a fleet of replicas sends its answer log (gateway/envoy/answer_log.py).
LEADER_CLUSTER = "graystack-leader"


def fallback_cluster(variant: str) -> str:
    """The aggregate cluster [variant, fallback]: a failed attempt on `variant` retries on the fallback."""
    return f"{variant}-with-fallback"


def shadow_cluster(variant: str) -> str:
    """The cluster mirrored requests go to: `variant`'s endpoints, its own stats, no retries."""
    return f"{variant}-shadow"


def shadow_hop_cluster(variant: str) -> str:
    """Where the mirror sends its copies: the internal listener that measures them (gateway/envoy/shadow.py)."""
    return f"{variant}-shadow-hop"


def shadow_listener(variant: str) -> str:
    """The internal listener mirrored copies pass through on their way to `shadow_cluster(variant)`."""
    return f"graystack-shadow-{variant}"


def fault_listener(variant: str) -> str:
    """The internal listener an injected fault puts in front of `variant`'s pods (gateway/envoy/faults.py)."""
    return f"graystack-fault-{variant}"


def unfaulted_cluster(variant: str) -> str:
    """Behind a fault's listener: `variant`'s real pods."""
    return f"{variant}-unfaulted"


def models_cluster(variant: str) -> str:
    """The cluster `GET /v1/models` goes to: `variant`'s endpoints, its own stats, out of the analysis."""
    return f"{variant}-models"


# Every route sets this request header to its segment (the header rule's value, or DEFAULT_SEGMENT), so the
# model servers can label their latency histograms by the segment a request came through.
SEGMENT_HEADER = "x-graystack-segment"
DEFAULT_SEGMENT = "default"

# The dynamic-metadata namespace the answer filter writes each answer's measurement under
# (gateway/envoy/answer_filter.py), and the access log's name that carries it to the gateway.
ANSWER_METADATA = "graystack.answer"
ANSWER_LOG = "graystack-answers"
SHADOW_LOG = "graystack-shadow-answers"  # the same, for mirrored copies (no client sees their answers)
# Answer capture (gateway/envoy/capture.py): the split routes' metadata key the answer filter samples by, and
# the dynamic-metadata namespace json_to_metadata writes the request's fields under.
CAPTURE_KEY = "capture"
CAPTURE_REQUEST_METADATA = "graystack.request"
# The header naming the variant on every answer, as Envoy routed it, and the one that passes on the name a
# server gave itself in VARIANT_HEADER, where it gave one (gateway/envoy/variant_header.py).
VARIANT_HEADER = "x-graystack-variant"
SERVER_VARIANT_HEADER = "x-graystack-server-variant"
# The request header naming the variant the split chose (gateway/envoy/routes.py), which the answer log
# carries: after a fallback retry the access log's upstream cluster is the fallback's, not the aggregate.
# graystack's Endpoint Picker marks each request it routes with it too (gateway/epp/protocol.py), over any
# copy a client sent: a model variant's answers, served by the baseline's pods, are placed by it.
ROUTED_HEADER = "x-graystack-routed"
# The shadow-hop cluster a mirrored copy goes to: set by each weighted cluster of a split that is not the
# mirror's variant, removed by the mirror's own (its requests are not copied to it twice), read by the
# route's mirror policy as its `cluster_header` (gateway/envoy/routes.py); a client's own value never stays.
MIRROR_HEADER = "x-graystack-mirror"

# Cohorts (gateway/envoy/affinity_filter.py): the request header the affinity filter writes the client's key
# into (any a client sent is dropped first), which the routes' hash policy reads; the dynamic-metadata
# namespace naming the source that gave it (`source`: e.g. `header:x-user-id`), which the answer log carries;
# and the namespace json_to_metadata writes body fields under.
AFFINITY_HEADER = "x-graystack-affinity"
AFFINITY_METADATA = "graystack.affinity"
AFFINITY_BODY_METADATA = "graystack.affinity.body"
# Where the rules match a body field (`routing.body`, e.g. `model`), the affinity filter writes its value into
# this request header (dropping any a client sent), and the rules' routes match it.
MATCH_HEADER = "x-graystack-match"
# A table route's name (gateway/envoy/api_routes.py): where it came from, then the API kind and the checks its
# traffic feeds. Envoy's access log carries the name to the answers (gateway/answers/entries.py), so the
# gateway measures each answer as its API's, whatever path the spec gave it.
_ROUTE_FIELDS = "|"


def api_route(where: str, kind: str, checks: tuple[str, ...]) -> str:
    return _ROUTE_FIELDS.join((where, kind, "+".join(checks)))


def api_of_route(name: str) -> tuple[str, frozenset[str]] | None:
    """(kind, checks) of a table route's name; None for any other name."""
    parts = name.rsplit(_ROUTE_FIELDS, 2)
    if len(parts) != 3:
        return None
    return parts[1], frozenset(check for check in parts[2].split("+") if check)


# The cluster of the Endpoint Picker graystack's own Envoy asks for a variant's pod (the spec's
# `envoy_picker`, gateway/envoy/picking.py).
PICKER_CLUSTER = "graystack-picker"
PICKER_LOG = "graystack-picks"  # the access log that tells the picker the gateway serves each pick's end
# GIE's Endpoint Picker protocol (gateway/epp/protocol.py): where the picked endpoints go (a header, and the
# key in the LB namespace), and the namespace of the gateway's subset hint. Here, for the builders too.
EPP_DESTINATION = "x-gateway-destination-endpoint"
EPP_LB_NAMESPACE = "envoy.lb"
EPP_SUBSET_NAMESPACE = "envoy.lb.subset_hint"
