"""`x-graystack-variant` on what Envoy sends back: the variant Envoy routed the answer to, named from
metadata the builders put on clusters and endpoints, never the name a server gives itself.

    an upstream's answer  the variant of the host that answered (its endpoint's metadata,
                          `%UPSTREAM_METADATA%`): after a fallback retry, the fallback. It overwrites what
                          the server sent: graystack's own servers name their model form (`baseline`,
                          `zero-layer`) in that header, which is not the variant's name in an A/A run, in
                          `graystack up --upstream a=URL`, or in a chart whose variants are `v1` and `v2`.
                          The server's own name is passed on as `x-graystack-server-variant`, for the
                          gateway to tell a deployment mix-up (gateway/answers/store.py); none where the
                          server sent none (vLLM, llama.cpp).
    a local reply         the variant the split chose (the cluster's metadata, `%CLUSTER_METADATA%`; the
                          `<variant>-with-fallback` aggregate carries its variant's name), overwriting
                          the above (gateway/envoy/local_replies.py); none where no cluster was chosen.
Envoy drops a header whose value formats empty. Checked against Envoy 1.40: behind the aggregate
cluster the endpoint's metadata names the host that answered, while after a fallback retry the access
log's upstream cluster is the fallback's, not the aggregate (so the split's choice rides its own request
header, `x-graystack-routed`: gateway/envoy/routes.py); the local reply mapper's headers apply after the
route's; a route's headers are added in order, and
`%RESP(...)%` reads the upstream's header as it was before the ones listed earlier changed it.
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


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, value=value),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def served_headers() -> list[base_pb2.HeaderValueOption]:
    """For every routed answer: the server's own name passed on, then the answering host's variant."""
    return [
        _header(names.SERVER_VARIANT_HEADER, f"%RESP({HEADER})%"),
        _header(HEADER, f"%UPSTREAM_METADATA({NAMESPACE}:variant)%"),
    ]


def chosen_header() -> base_pb2.HeaderValueOption:
    """For Envoy's own replies: the variant the split chose."""
    return _header(HEADER, f"%CLUSTER_METADATA({NAMESPACE}:variant)%")
