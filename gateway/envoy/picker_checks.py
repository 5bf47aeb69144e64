"""graystack's own Envoy asking the picker its gateway serves (the spec's `envoy_picker` with `serve: true`;
pure): a check a request by ext_authz over HTTP/1.1 on the picker's port (gateway/epp/checks.py), and a
log of each picked request's end to the gateway's gRPC server (gateway/answers/receiver.py).

    the listener      an ext_authz filter whose HTTP service is the picker: sent the request's
                      `x-request-id` and cohort header, never a body; the pod in its answer's
                      `x-gateway-destination-endpoint` becomes the filter's dynamic metadata, which the
                      variant's `override_host` reads (gateway/envoy/picking.py). Off on every route but
                      the split's, and fail-open (`failure_mode_allow`): a picker down or slow past
                      `timeout` lets the request through unpicked
    each split route  each weighted cluster turns the check on with the variant in its path prefix
                      (`/<variant>`): the split's choice, which the picker takes as given
    the log           a gRPC access log (`graystack-picks`) on the answer log's cluster, an entry a picked
                      request (by the metadata) as it ends, unbatched, with its `x-request-id`: the picker
                      holds the request in flight until then (gateway/epp/held.py), a stream to its last
                      chunk, a reset stream too. In Kubernetes both reach the leading replica, where the
                      chart's picker Service points (one picker sees every Envoy's requests)

Why ext_authz over HTTP/1.1 and not ext_proc, which a picker of the user's is asked by: the same pick
costs +0.3 to +0.5 ms this way against +1.3 to +1.4 ms over ext_proc's gRPC stream through grpc.aio
(bench/epp_transport.py, BENCHMARKS.md issue 37), and this Envoy asks the picker for nothing ext_proc
alone could carry. Why the variant rides the path and not a header: a client could send the header,
and a route's own headers are added after the filters run."""

from __future__ import annotations

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import http_uri_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.matcher.v3 import metadata_pb2 as metadata_matcher_pb2
from envoy.type.matcher.v3 import string_pb2, value_pb2
from google.protobuf import any_pb2, wrappers_pb2

from gateway import names
from gateway.envoy.answer_log import LOGGER, grpc_log
from gateway.envoy.common import any_proto, duration
from gateway.spec.envoy_picker import EnvoyPicker

EXT_AUTHZ = "envoy.filters.http.ext_authz"
NAMESPACE = EXT_AUTHZ  # where the filter puts the answer's headers as dynamic metadata
REQUEST_ID = "x-request-id"


def _service(picker: EnvoyPicker, variant: str = "") -> ext_authz_pb2.HttpService:
    """The picker's HTTP service, its checks' paths prefixed with `/<variant>`."""
    return ext_authz_pb2.HttpService(
        server_uri=http_uri_pb2.HttpUri(
            uri=f"http://{names.PICKER_CLUSTER}",
            cluster=names.PICKER_CLUSTER,
            timeout=duration(picker.timeout),
        ),
        path_prefix=f"/{variant}" if variant else "",
        authorization_response=ext_authz_pb2.AuthorizationResponse(
            dynamic_metadata_from_headers=string_pb2.ListStringMatcher(
                patterns=[string_pb2.StringMatcher(exact=names.EPP_DESTINATION)]
            )
        ),
    )


def build_check_filter(picker: EnvoyPicker, cohort_header: str | None) -> hcm_pb2.HttpFilter:
    """The ext_authz filter to the picker: fail-open, the request's id and cohort header sent."""
    sent = [REQUEST_ID, *([cohort_header.lower()] if cohort_header else [])]
    config = ext_authz_pb2.ExtAuthz(
        http_service=_service(picker),
        failure_mode_allow=True,
        allowed_headers=string_pb2.ListStringMatcher(
            patterns=[string_pb2.StringMatcher(exact=header) for header in sent]
        ),
    )
    return hcm_pb2.HttpFilter(name=EXT_AUTHZ, typed_config=any_proto(config))


def checks_off() -> dict[str, any_pb2.Any]:
    """A virtual host's `typed_per_filter_config`: no route asks the picker unless it turns it on."""
    return {EXT_AUTHZ: any_proto(ext_authz_pb2.ExtAuthzPerRoute(disabled=True))}


def checks_for(picker: EnvoyPicker, variant: str) -> dict[str, any_pb2.Any]:
    """A weighted cluster's `typed_per_filter_config`: its requests ask the picker, naming `variant`."""
    settings = ext_authz_pb2.CheckSettings(http_service=_service(picker, variant))
    return {EXT_AUTHZ: any_proto(ext_authz_pb2.ExtAuthzPerRoute(check_settings=settings))}


def build_picker_log(cluster: str) -> accesslog_pb2.AccessLog:
    """The log that tells the picker when each request it picked ended (by its `x-request-id`:
    gateway/epp/held.py): on `cluster`, the answer log's (the gateway's gRPC server; the leader's in
    Kubernetes, where the picker is served too), the requests with a pick in their metadata, each entry
    sent as it ends (no batching: a count that outlasted its answer would rank a pod that just answered
    as busy)."""
    picked = accesslog_pb2.AccessLogFilter(
        metadata_filter=accesslog_pb2.MetadataFilter(
            matcher=metadata_matcher_pb2.MetadataMatcher(
                filter=NAMESPACE,
                path=[metadata_matcher_pb2.MetadataMatcher.PathSegment(key=names.EPP_DESTINATION)],
                value=value_pb2.ValueMatcher(present_match=True),
            ),
            match_if_key_not_found=wrappers_pb2.BoolValue(value=False),
        )
    )
    config = als_pb2.HttpGrpcAccessLogConfig(common_config=grpc_log(cluster, names.PICKER_LOG, 0))
    return accesslog_pb2.AccessLog(name=LOGGER, filter=picked, typed_config=any_proto(config))
