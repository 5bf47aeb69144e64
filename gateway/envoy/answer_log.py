"""The access log that carries each answer's measurement to the gateway: Envoy's gRPC access-log service
(envoy.service.accesslog.v3 StreamAccessLogs), one entry per routed inference request.

The gateway serves the access-log service on its xDS gRPC server, so the log rides a cluster the bootstrap
already has: the xDS cluster (`names.XDS_CLUSTER`) where one gateway serves, or, where several replicas
do and only the leader judges the rollout, the bootstrap's leader cluster (`names.LEADER_CLUSTER`, the
chart's leader-only Service), named in the node metadata. A follower refuses the log (gateway/answers/
receiver.py), so Envoy reconnects, and the leader's Service takes the new connection. Envoy's gRPC logger buffers entries per worker and flushes them every FLUSH_S (or at
BUFFER_BYTES) on a stream of its own, off every request's path: a gateway that is down or slow loses
entries (Envoy's `access_logs.grpc_access_log.logs_dropped`), never requests.

Only POSTs are logged, so `GET /v1/models`, health checks and reads by id stay out; of the POSTs, those
that reached no variant (a refusal, a pinned API, an unknown path sent to the baseline) are dropped by the
gateway by their route's name (gateway/answers/entries.py). The entry carries the route's name (its API
and the checks its traffic feeds, gateway/envoy/api_routes.py), the segment the route set
(`x-graystack-segment`), the variant the split chose (`x-graystack-routed`), the variant of the host that
answered (`x-graystack-variant`, which Envoy set: gateway/envoy/variant_header.py) and the name the server
gave itself (`x-graystack-server-variant`), the request's body bytes, its timings, response flags (a
reset, a client that went away) and the answer filter's dynamic metadata.
"""

from __future__ import annotations

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import config_source_pb2, grpc_service_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import wrappers_pb2

from gateway import names
from gateway.envoy.common import any_proto, duration

FLUSH_S = 1.0
BUFFER_BYTES = 65_536
LOGGER = "envoy.access_loggers.http_grpc"


def grpc_log(
    cluster: str, log_name: str, buffer_bytes: int, flush: float | None = None
) -> als_pb2.CommonGrpcAccessLogConfig:
    """A gRPC access log named `log_name` on `cluster`, buffered up to `buffer_bytes` (0: an entry is sent
    as it comes) and `flush` seconds (None: Envoy's default)."""
    return als_pb2.CommonGrpcAccessLogConfig(
        log_name=log_name,
        grpc_service=grpc_service_pb2.GrpcService(
            envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=cluster)
        ),
        transport_api_version=config_source_pb2.V3,
        buffer_flush_interval=duration(flush) if flush is not None else None,
        buffer_size_bytes=wrappers_pb2.UInt32Value(value=buffer_bytes),
    )


def build_answer_log(
    cluster: str = names.XDS_CLUSTER, log_name: str = names.ANSWER_LOG
) -> accesslog_pb2.AccessLog:
    """`log_name`: ANSWER_LOG for the clients' answers, SHADOW_LOG for mirrored copies' (shadow.py)."""
    only_posts = accesslog_pb2.AccessLogFilter(
        header_filter=accesslog_pb2.HeaderFilter(
            header=route_components_pb2.HeaderMatcher(
                name=":method", string_match=string_pb2.StringMatcher(exact="POST")
            )
        )
    )
    config = als_pb2.HttpGrpcAccessLogConfig(
        common_config=grpc_log(cluster, log_name, BUFFER_BYTES, FLUSH_S),
        additional_request_headers_to_log=[names.SEGMENT_HEADER, names.AFFINITY_HEADER, names.ROUTED_HEADER],
        additional_response_headers_to_log=[names.VARIANT_HEADER, names.SERVER_VARIANT_HEADER],
    )
    return accesslog_pb2.AccessLog(name=LOGGER, filter=only_posts, typed_config=any_proto(config))
