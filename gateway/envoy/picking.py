"""graystack's own Envoy asking an Endpoint Picker for each request's pod within its variant (the spec's
`envoy_picker`, issue 37; pure). Two shapes: the picker the gateway serves (`serve: true`) is asked by
ext_authz over HTTP/1.1 and told each pick's end in a log (gateway/envoy/picker_checks.py); a picker of
the user's (`graystack epp`, llm-d's) is asked as GIE's protocol has it, by ext_proc:

    the listener      an ext_proc filter to the picker, sent the request's headers and the answer's,
                      never a body; off on every route but the split's. Envoy closes the picker's stream
                      after the answer's headers, so the picker counts a request in flight from its pick
                      to its first byte (a streamed answer's body is not counted)
    each split route  each weighted cluster turns it on for its requests and names its variant to the
                      picker in the stream's gRPC metadata (`x-graystack-routed`): the split's choice,
                      made before any filter runs, which the picker takes as given and never draws again
    each variant      (both shapes) its cluster balanced by `override_host`, which takes the pod the
                      picker put in the filter's metadata (`envoy.lb`, or ext_authz's namespace) when the
                      pod is one of the cluster's, else falls back to the variant's own `load_balancing`

Why the variant rides the gRPC metadata and not GIE's subset hint (`envoy.lb.subset_hint`, a list of
pods): the hint would put each variant's pods into the routes, so every pod that comes or goes would
rewrite the route table; the picker knows the pods itself. A header would be the client's to forge;
the stream's metadata is Envoy's alone. The picker's `clear_route_cache` is ignored (`RETAIN`): a
cleared route would draw the weighted split again, and its pick could land in another variant's cluster.

Why no body: on Envoy 1.40 a request whose body was streamed to a picker that is down is answered with
an error, not let through (tests/integration/test_gie_conformance_epp.py shows the same race), so
fail-open would hold only for requests without one. The price: the scorers that read the prompt
(`prefix`, `lora`, `prefill`) have nothing to read here; `in_flight`, `queue`, `kv_cache` and `session`
work as behind a GIE gateway.

Fail-open: the filter lets a request through when the picker is down, slow or errs
(`failure_mode_allow`, also on each route's override, which otherwise fails closed), and then, with no
pick in the metadata, `override_host` serves by the fallback policy. A picked pod outside the cluster (a
variant whose pods changed under the picker) is served the same way. The served pod is not reported back:
this Envoy's protos (xds-protos 1.85) lack `selected_host_key`."""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, extension_pb2, grpc_service_pb2, protocol_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2, processing_mode_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.load_balancing_policies.override_host.v3 import override_host_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.metadata.v3 import metadata_pb2
from google.protobuf import any_pb2, wrappers_pb2

from gateway import names
from gateway.envoy import picker_checks
from gateway.envoy.balancing import policy_extension, policy_of
from gateway.envoy.common import any_proto, duration, one_host_cluster
from gateway.spec.envoy_picker import EnvoyPicker

EXT_PROC = "envoy.filters.http.ext_proc"
OVERRIDE_HOST = "envoy.load_balancing_policies.override_host"
_MODE = processing_mode_pb2.ProcessingMode


def picked_balancing(policy: str, picker: EnvoyPicker) -> dict[str, Any]:
    """A variant cluster's fields: the picker's pod where it gave one of the cluster's, else `policy`."""
    override = override_host_pb2.OverrideHost(
        override_host_sources=[
            override_host_pb2.OverrideHost.OverrideHostSource(
                metadata=metadata_pb2.MetadataKey(
                    key=picker_checks.NAMESPACE if picker.serve else names.EPP_LB_NAMESPACE,
                    path=[metadata_pb2.MetadataKey.PathSegment(key=names.EPP_DESTINATION)],
                )
            )
        ],
        fallback_policy=policy_of(policy_extension(policy)),
    )
    extension = extension_pb2.TypedExtensionConfig(name=OVERRIDE_HOST, typed_config=any_proto(override))
    return {"load_balancing_policy": policy_of(extension)}


def build_picker_filter(picker: EnvoyPicker, cohort_header: str | None) -> hcm_pb2.HttpFilter:
    """The served picker's check filter (picker_checks.py), else the ext_proc filter to the picker's
    cluster: fail-open, the `envoy.lb` namespaces forwarded (the subset hint, where another filter sets
    one) and received (the pick), the route kept as drawn."""
    if picker.serve:
        return picker_checks.build_check_filter(picker, cohort_header)
    config = ext_proc_pb2.ExternalProcessor(
        grpc_service=grpc_service_pb2.GrpcService(
            envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=names.PICKER_CLUSTER),
            # no `timeout`: it would bound the whole stream, which lasts the request (a long answer's
            # stream cut would release its in-flight count early); `message_timeout` bounds each answer
        ),
        failure_mode_allow=True,
        message_timeout=duration(picker.timeout),
        processing_mode=_MODE(
            request_header_mode=_MODE.SEND,
            response_header_mode=_MODE.SEND,
            request_body_mode=_MODE.NONE,
            response_body_mode=_MODE.NONE,
            request_trailer_mode=_MODE.SKIP,
            response_trailer_mode=_MODE.SKIP,
        ),
        metadata_options=ext_proc_pb2.MetadataOptions(
            forwarding_namespaces=ext_proc_pb2.MetadataOptions.MetadataNamespaces(
                untyped=[names.EPP_LB_NAMESPACE, names.EPP_SUBSET_NAMESPACE]
            ),
            receiving_namespaces=ext_proc_pb2.MetadataOptions.MetadataNamespaces(
                untyped=[names.EPP_LB_NAMESPACE]
            ),
        ),
        route_cache_action=ext_proc_pb2.ExternalProcessor.RETAIN,
    )
    return hcm_pb2.HttpFilter(name=EXT_PROC, typed_config=any_proto(config))


def picker_off(picker: EnvoyPicker) -> dict[str, any_pb2.Any]:
    """A virtual host's `typed_per_filter_config`: no route asks the picker unless it turns it on."""
    if picker.serve:
        return picker_checks.checks_off()
    return {EXT_PROC: any_proto(ext_proc_pb2.ExtProcPerRoute(disabled=True))}


def picker_for(picker: EnvoyPicker, variant: str) -> dict[str, any_pb2.Any]:
    """A weighted cluster's `typed_per_filter_config`: its requests ask the picker, naming `variant`."""
    if picker.serve:
        return picker_checks.checks_for(picker, variant)
    overrides = ext_proc_pb2.ExtProcOverrides(
        grpc_initial_metadata=[base_pb2.HeaderValue(key=names.ROUTED_HEADER, value=variant)],
        failure_mode_allow=wrappers_pb2.BoolValue(value=True),  # an override left unset fails closed
    )
    return {EXT_PROC: any_proto(ext_proc_pb2.ExtProcPerRoute(overrides=overrides))}


def build_picker_cluster(picker: EnvoyPicker) -> cluster_pb2.Cluster:
    """The picker's address, over TLS accepting its self-signed certificate where `tls`: HTTP/2 for a
    picker of the user's (gRPC), HTTP/1.1 and TCP for the one the gateway serves (its checks and log)."""
    explicit = http_protocol_options_pb2.HttpProtocolOptions.ExplicitHttpConfig
    options = http_protocol_options_pb2.HttpProtocolOptions(
        explicit_http_config=explicit(http_protocol_options=protocol_pb2.Http1ProtocolOptions())
        if picker.serve
        else explicit(http2_protocol_options=protocol_pb2.Http2ProtocolOptions())
    )
    cluster = one_host_cluster(names.PICKER_CLUSTER, picker.host, picker.port, options, picker.timeout)
    if picker.tls:
        tls = tls_pb2.UpstreamTlsContext(
            common_tls_context=tls_pb2.CommonTlsContext(alpn_protocols=[] if picker.serve else ["h2"]),
        )
        tls.common_tls_context.validation_context.SetInParent()
        cluster.transport_socket.name = "envoy.transport_sockets.tls"
        cluster.transport_socket.typed_config.CopyFrom(any_proto(tls))
    return cluster
