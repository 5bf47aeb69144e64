"""The static Envoy bootstrap: who the proxy is, where its listener binds, and where ADS lives.

Everything else (listener, routes, clusters, endpoints) comes over ADS. The listener address travels
in the node metadata so one control plane can serve proxies that listen on different ports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import (
    backoff_pb2,
    base_pb2,
    config_source_pb2,
    extension_pb2,
    grpc_service_pb2,
    protocol_pb2,
)
from envoy.config.overload.v3 import overload_pb2
from envoy.extensions.bootstrap.internal_listener.v3 import internal_listener_pb2
from envoy.extensions.resource_monitors.downstream_connections.v3 import downstream_connections_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import json_format, struct_pb2, wrappers_pb2
from google.protobuf.message import Message

from gateway import names
from gateway.envoy.common import any_proto, duration, one_host_cluster, socket_address
from gateway.envoy.resources import ListenerAddress

METADATA_KEY = "graystack"


@dataclass(frozen=True)
class BootstrapOptions:
    node_id: str = "graystack-envoy"
    node_cluster: str = "graystack"
    xds_host: str = "127.0.0.1"
    xds_port: int = 18000
    listen: ListenerAddress = ListenerAddress()
    admin_host: str = "127.0.0.1"
    admin_port: int = 9901
    # A bound on open client connections, so a flood degrades Envoy instead of exhausting it.
    max_downstream_connections: int = 50_000
    # How fast Envoy reconnects to a restarted control plane (its default backs off to 30 s).
    reconnect_base: float = 0.25
    reconnect_max: float = 2.0
    # HTTP/2 pings on the ADS connection: a control plane behind a silent partition is noticed within
    # interval + timeout (8 s), and Envoy reconnects, instead of waiting on a dead connection.
    keepalive_interval: float = 4.0
    keepalive_timeout: float = 4.0
    # Where a fleet of gateway replicas' leader is reached (the chart's leader-only Service, on the
    # xDS port unless `leader_port` says otherwise): the answer log goes there, since only the leader
    # judges the rollout. None: one gateway, and the log rides the xDS cluster.
    leader_host: str | None = None
    leader_port: int | None = None


def listener_address(node_metadata: struct_pb2.Struct) -> ListenerAddress:
    """Where the proxy wants its listener, from the node metadata this bootstrap wrote."""
    fields = node_metadata.fields.get(METADATA_KEY)
    if fields is None:
        return ListenerAddress()
    ours = json_format.MessageToDict(fields.struct_value)
    default = ListenerAddress()
    port = str(ours.get("listen_port", default.port))
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"node metadata {METADATA_KEY}.listen_port: {port!r} is not a port number")
    cluster = ours.get("answer_log_cluster", default.answer_log_cluster)
    if cluster not in (names.XDS_CLUSTER, names.LEADER_CLUSTER):
        raise ValueError(
            f"node metadata {METADATA_KEY}.answer_log_cluster: {cluster!r} is neither "
            f"{names.XDS_CLUSTER} nor {names.LEADER_CLUSTER}"
        )
    return ListenerAddress(
        host=str(ours.get("listen_address", default.host)), port=int(port), answer_log_cluster=cluster
    )


def build_bootstrap(options: BootstrapOptions) -> bootstrap_pb2.Bootstrap:
    ads_source = config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(), resource_api_version=config_source_pb2.V3
    )
    ours = {"listen_address": options.listen.host, "listen_port": str(options.listen.port)}
    clusters = [_grpc_cluster(names.XDS_CLUSTER, options.xds_host, options.xds_port, options)]
    if options.leader_host is not None:
        ours["answer_log_cluster"] = names.LEADER_CLUSTER
        leader_port = options.leader_port or options.xds_port
        clusters.append(
            _grpc_cluster(names.LEADER_CLUSTER, options.leader_host, leader_port, options, per_stream=True)
        )
    metadata = struct_pb2.Struct()
    metadata.update({METADATA_KEY: ours})
    return bootstrap_pb2.Bootstrap(
        # Injected faults put an internal listener in front of a variant (gateway/envoy/faults.py).
        bootstrap_extensions=[
            extension_pb2.TypedExtensionConfig(
                name="envoy.bootstrap.internal_listener",
                typed_config=any_proto(internal_listener_pb2.InternalListener()),
            )
        ],
        node=base_pb2.Node(id=options.node_id, cluster=options.node_cluster, metadata=metadata),
        admin=bootstrap_pb2.Admin(address=socket_address(options.admin_host, options.admin_port)),
        dynamic_resources=bootstrap_pb2.Bootstrap.DynamicResources(
            ads_config=config_source_pb2.ApiConfigSource(
                api_type=config_source_pb2.ApiConfigSource.GRPC,
                transport_api_version=config_source_pb2.V3,
                set_node_on_first_message_only=True,
                grpc_services=[
                    grpc_service_pb2.GrpcService(
                        envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=names.XDS_CLUSTER),
                        retry_policy=base_pb2.RetryPolicy(
                            retry_back_off=backoff_pb2.BackoffStrategy(
                                base_interval=duration(options.reconnect_base),
                                max_interval=duration(options.reconnect_max),
                            )
                        ),
                    )
                ],
            ),
            cds_config=ads_source,
            lds_config=ads_source,
        ),
        static_resources=bootstrap_pb2.Bootstrap.StaticResources(clusters=clusters),
        # Histograms (upstream_rq_time) reach /stats only at a flush: 1 s instead of 5 s, so the
        # rollout's latency window lags the traffic by at most a second.
        stats_flush_interval=duration(1.0),
        overload_manager=overload_pb2.OverloadManager(
            resource_monitors=[
                overload_pb2.ResourceMonitor(
                    name="envoy.resource_monitors.global_downstream_max_connections",
                    typed_config=any_proto(
                        downstream_connections_pb2.DownstreamConnectionsConfig(
                            max_active_downstream_connections=options.max_downstream_connections
                        )
                    ),
                )
            ]
        ),
    )


def _grpc_cluster(
    name: str, host: str, port: int, options: BootstrapOptions, per_stream: bool = False
) -> cluster_pb2.Cluster:
    """A cluster of the gateway's gRPC port on `host` (HTTP/2, with keepalive pings). `per_stream`: each
    stream on a connection of its own, so a stream reopened after the leader changed reaches, through
    the leader-only Service, the new leader and not the connection's old one."""
    keepalive = protocol_pb2.KeepaliveSettings(
        interval=duration(options.keepalive_interval), timeout=duration(options.keepalive_timeout)
    )
    protocol = http_protocol_options_pb2.HttpProtocolOptions(
        explicit_http_config=http_protocol_options_pb2.HttpProtocolOptions.ExplicitHttpConfig(
            http2_protocol_options=protocol_pb2.Http2ProtocolOptions(connection_keepalive=keepalive)
        ),
        common_http_protocol_options=(
            protocol_pb2.HttpProtocolOptions(max_requests_per_connection=wrappers_pb2.UInt32Value(value=1))
            if per_stream
            else None
        ),
    )
    return one_host_cluster(name, host, port, protocol, 1.0)


def message_yaml(message: Message) -> str:
    """A proto as the YAML Envoy reads (typed `Any` fields carry their `@type`)."""
    as_json = json_format.MessageToJson(message, preserving_proto_field_name=True)
    return yaml.safe_dump(json.loads(as_json), sort_keys=False)


def bootstrap_yaml(options: BootstrapOptions) -> str:
    return message_yaml(build_bootstrap(options))
