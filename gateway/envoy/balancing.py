"""How a cluster over a variant's pods picks a pod for each request (pure).

`least_request`: Envoy's least-request policy scanning every host (`FULL_SCAN`) and taking the one with
the fewest requests in flight, ties broken at random. A streamed answer stays in flight until its last
event, so a pod holding long streams is passed over until they end; round robin counts a long stream and
a one-token answer alike. Why a full scan and not Envoy's default of two random choices: the choices are
drawn with replacement, so with two pods a quarter of the picks compare a pod with itself and land on the
busy one whatever its load. A scan is one pass over a variant's pods, and the counts are this Envoy's own
(exact, never stale), so the herding that random choices guard against between many balancers does not
arise within one.

`ring_hash`, `maglev`: the pod is a function of the routes' hash, the `routing.affinity` key
(gateway/envoy/affinity.py), so a client's conversation keeps reaching one pod and its prefix cache while
the pods stay the same; a pod that joins or leaves moves only about its share of the keys (Maglev spreads
them more evenly, a ring moves fewer). A request without a key gets a random pod. Envoy's defaults for
both (a ring of 1,024 to 8M entries, a Maglev table of 65,537) are ample for a variant's few pods.

Each cluster counts its own requests: the variant's cluster does not see the shadow copies or
`GET /v1/models` calls on the same pods (gateway/envoy/resources.py).
"""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import extension_pb2
from envoy.extensions.load_balancing_policies.least_request.v3 import least_request_pb2
from envoy.extensions.load_balancing_policies.maglev.v3 import maglev_pb2
from envoy.extensions.load_balancing_policies.ring_hash.v3 import ring_hash_pb2
from envoy.extensions.load_balancing_policies.round_robin.v3 import round_robin_pb2
from google.protobuf.message import Message

from gateway.envoy.common import any_proto

LEAST_REQUEST_POLICY = "envoy.load_balancing_policies.least_request"


def _extensions() -> dict[str, tuple[str, Message]]:
    return {
        "round_robin": ("envoy.load_balancing_policies.round_robin", round_robin_pb2.RoundRobin()),
        "least_request": (
            LEAST_REQUEST_POLICY,
            least_request_pb2.LeastRequest(selection_method=least_request_pb2.LeastRequest.FULL_SCAN),
        ),
        "ring_hash": ("envoy.load_balancing_policies.ring_hash", ring_hash_pb2.RingHash()),
        "maglev": ("envoy.load_balancing_policies.maglev", maglev_pb2.Maglev()),
    }


def policy_extension(policy: str) -> extension_pb2.TypedExtensionConfig:
    """`policy` as a load-balancing extension, the form a policy that wraps another takes (the picker's
    `override_host`, gateway/envoy/picking.py, falls back to the variant's own)."""
    known = _extensions()
    if policy not in known:
        raise ValueError(
            f"unknown load-balancing policy {policy!r}; round_robin, least_request, ring_hash or maglev"
        )
    name, config = known[policy]
    return extension_pb2.TypedExtensionConfig(name=name, typed_config=any_proto(config))


def policy_of(extension: extension_pb2.TypedExtensionConfig) -> cluster_pb2.LoadBalancingPolicy:
    """A cluster's `load_balancing_policy` of one extension."""
    return cluster_pb2.LoadBalancingPolicy(
        policies=[cluster_pb2.LoadBalancingPolicy.Policy(typed_extension_config=extension)]
    )


def load_balancing(policy: str) -> dict[str, Any]:
    """The Cluster fields for `policy` (`round_robin`, `least_request`, `ring_hash` or `maglev`, the spec's
    names): Envoy's enum where it has one, else the extension."""
    enums = {
        "round_robin": cluster_pb2.Cluster.ROUND_ROBIN,
        "ring_hash": cluster_pb2.Cluster.RING_HASH,
        "maglev": cluster_pb2.Cluster.MAGLEV,
    }
    if policy in enums:
        return {"lb_policy": enums[policy]}
    return {"load_balancing_policy": policy_of(policy_extension(policy))}
