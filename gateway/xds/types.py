"""xDS type URLs and the order pushes go out in (make-before-break: a route never names a cluster
Envoy does not have yet, and every cluster has its endpoints before anything depends on it)."""

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from google.protobuf.message import Message

_PREFIX = "type.googleapis.com/"
CLUSTER = _PREFIX + "envoy.config.cluster.v3.Cluster"
ENDPOINT = _PREFIX + "envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER = _PREFIX + "envoy.config.listener.v3.Listener"
ROUTE = _PREFIX + "envoy.config.route.v3.RouteConfiguration"

PUSH_ORDER = (CLUSTER, ENDPOINT, LISTENER, ROUTE)
SHORT_NAME = {CLUSTER: "cds", ENDPOINT: "eds", LISTENER: "lds", ROUTE: "rds"}
# SotW: Envoy subscribes to all clusters and listeners; endpoints and routes by name.
WILDCARD = frozenset({CLUSTER, LISTENER})


def resource_name(message: Message) -> str:
    if isinstance(message, endpoint_pb2.ClusterLoadAssignment):
        return message.cluster_name
    if isinstance(message, cluster_pb2.Cluster | listener_pb2.Listener | route_pb2.RouteConfiguration):
        return message.name
    raise TypeError(f"not an xDS resource this server serves: {type(message).__name__}")


def type_url(message: Message) -> str:
    return _PREFIX + message.DESCRIPTOR.full_name
