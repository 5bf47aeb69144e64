"""`x-graystack-variant` on what Envoy sends back, for servers that do not send it themselves (vLLM,
llama.cpp) and for Envoy's own replies, named from metadata the builders put on clusters and endpoints.

    an upstream's answer  the variant of the host that answered (its endpoint's metadata,
                          `%UPSTREAM_METADATA%`): after a fallback retry, the fallback. Added only where
                          the server sent none, so graystack's own servers' header stands.
    a local reply         the variant the split chose (the cluster's metadata, `%CLUSTER_METADATA%`; the
                          `<variant>-with-fallback` aggregate carries its variant's name), overwriting
                          the above (gateway/envoy/local_replies.py); none where no cluster was chosen.
Envoy drops a header whose value formats empty. Checked against Envoy 1.40: behind the aggregate
cluster `%UPSTREAM_CLUSTER%` names the aggregate, the endpoint's metadata the host that answered; the
local reply mapper's headers apply after the route's.
"""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2
from google.protobuf import struct_pb2

from gateway import names

NAMESPACE = "graystack"
HEADER = names.VARIANT_HEADER


def variant_metadata(variant: str) -> base_pb2.Metadata:
    """Metadata naming the variant whose traffic a cluster (or an endpoint) carries."""
    fields = struct_pb2.Struct()
    fields.update({"variant": variant})
    return base_pb2.Metadata(filter_metadata={NAMESPACE: fields})


def _header(value: str, action: int) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=HEADER, value=value), append_action=action
    )


def served_header() -> base_pb2.HeaderValueOption:
    """For every routed answer: the answering host's variant, unless the server named itself."""
    return _header(f"%UPSTREAM_METADATA({NAMESPACE}:variant)%", base_pb2.HeaderValueOption.ADD_IF_ABSENT)


def chosen_header() -> base_pb2.HeaderValueOption:
    """For Envoy's own replies: the variant the split chose."""
    return _header(
        f"%CLUSTER_METADATA({NAMESPACE}:variant)%", base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    )
