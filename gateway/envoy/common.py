"""Small proto helpers every builder shares (pure)."""

from __future__ import annotations

import ipaddress

from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2, protocol_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import any_pb2, duration_pb2, wrappers_pb2
from google.protobuf.message import Message

# Enough concurrent retries that a failing variant's traffic can all fall back at once.
MAX_CONCURRENT_RETRIES = 1024
# Envoy drops a pooled connection to a model server idle this long, before the server does: uvicorn
# (graystack's, vLLM's) and llama.cpp's cpp-httplib close idle keep-alive connections after 5 s, and a
# request Envoy sends down one the server is closing fails as a reset (envoyproxy/envoy#2324), an error
# the candidate never made. Envoy's own default is an hour.
SERVER_IDLE_TIMEOUT_S = 4.0


def duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def any_proto(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def ads_config_source() -> config_source_pb2.ConfigSource:
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(), resource_api_version=config_source_pb2.V3
    )


def circuit_breakers() -> circuit_breaker_pb2.CircuitBreakers:
    return circuit_breaker_pb2.CircuitBreakers(
        thresholds=[
            circuit_breaker_pb2.CircuitBreakers.Thresholds(
                priority=base_pb2.DEFAULT, max_retries=wrappers_pb2.UInt32Value(value=MAX_CONCURRENT_RETRIES)
            )
        ]
    )


def server_connections() -> dict[str, dict[str, any_pb2.Any]]:
    """A cluster's options for connections to model servers: HTTP/1.1, idle ones closed by Envoy first."""
    options = http_protocol_options_pb2.HttpProtocolOptions(
        explicit_http_config=http_protocol_options_pb2.HttpProtocolOptions.ExplicitHttpConfig(
            http_protocol_options=protocol_pb2.Http1ProtocolOptions()
        ),
        common_http_protocol_options=protocol_pb2.HttpProtocolOptions(
            idle_timeout=duration(SERVER_IDLE_TIMEOUT_S)
        ),
    )
    return {
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": any_proto(options)
        }
    }


def socket_address(host: str, port: int) -> address_pb2.Address:
    return address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=port))


def http_listener(
    name: str, manager: hcm_pb2.HttpConnectionManager, address: address_pb2.Address | None = None
) -> listener_pb2.Listener:
    """One HTTP connection manager on `address`; with none, an internal listener, which a cluster
    reaches by name (the fault and shadow hops: gateway/envoy/faults.py, shadow.py)."""
    chain = listener_components_pb2.FilterChain(
        filters=[
            listener_components_pb2.Filter(
                name="envoy.filters.network.http_connection_manager", typed_config=any_proto(manager)
            )
        ]
    )
    if address is None:
        return listener_pb2.Listener(
            name=name, internal_listener=listener_pb2.Listener.InternalListenerConfig(), filter_chains=[chain]
        )
    return listener_pb2.Listener(name=name, address=address, filter_chains=[chain])


def one_host_cluster(
    name: str, host: str, port: int, protocol: http_protocol_options_pb2.HttpProtocolOptions, connect: float
) -> cluster_pb2.Cluster:
    """A cluster of one gRPC or HTTP server at `host:port`: STATIC for an IP, STRICT_DNS for a name (a
    Service in Kubernetes), connections made as `protocol` says."""
    endpoint = endpoint_components_pb2.Endpoint(address=socket_address(host, port))
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.STATIC if _is_ip(host) else cluster_pb2.Cluster.STRICT_DNS,
        connect_timeout=duration(connect),
        typed_extension_protocol_options={
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": any_proto(protocol)
        },
        load_assignment=endpoint_pb2.ClusterLoadAssignment(
            cluster_name=name,
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    lb_endpoints=[endpoint_components_pb2.LbEndpoint(endpoint=endpoint)]
                )
            ],
        ),
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
