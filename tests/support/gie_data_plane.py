"""A GIE gateway's data plane on the real Envoy 1.40: it stands in for the Envoy that a conformant gateway
(Istio, Envoy Gateway, Envoy AI Gateway, llm-d standalone) programs for one InferencePool, since none of
those gateways can run here. One listener whose ext_proc filter asks the Endpoint Picker about every
request, configured as those gateways configure it (request and response bodies FULL_DUPLEX_STREAMED,
trailers sent, the `envoy.lb` namespaces forwarded and received), over one pool cluster in either of the
two shapes they use:
  - `original_dst`: an ORIGINAL_DST cluster that dials the address in the `x-gateway-destination-endpoint`
    header (llm-d standalone, Envoy AI Gateway); it knows no pods, so it has no fallback and cannot report
    the endpoint that served;
  - `override_host`: a STATIC cluster of the pool's pods with the `override_host` load-balancing policy
    reading the `envoy.lb` metadata (Istio, Envoy Gateway): only the pool's pods are taken, the list's
    later entries serve retries, the endpoint that served goes back to the picker in `envoy.lb`
    (`selected_host_key`), and with no pick round robin serves (what makes fail-open work).
One more, `override_host_aggregate`, is no gateway's: the override_host cluster behind an aggregate
cluster, as graystack's own Envoy puts a variant behind one for `retries.fallback` (its picker is refused
there: tests/integration/test_envoy_picker.py shows why).
Two more shapes, with no picker, are what it is compared with (bench/epp_picking.py): `round_robin` and
`least_request`, the pool's pods balanced by Envoy alone (no ext_proc filter).
A test header, `x-test-subset-hint: ip:port,...`, becomes the gateway's subset hint (`envoy.lb.subset_hint`
metadata, by a Lua filter), the way a gateway would narrow the pool. No TLS to clients, one route."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml

from gateway import names
from gateway.epp import protocol
from graystack.local.processes import ManagedProcess, free_port, start_process

Profile = Literal["original_dst", "override_host", "override_host_aggregate", "round_robin", "least_request"]
# the shapes that ask the picker
PICKED: tuple[Profile, ...] = ("original_dst", "override_host", "override_host_aggregate")
SUBSET_TEST_HEADER = "x-test-subset-hint"

# The subset hint as a list value, from the test header: what a gateway narrowing the pool would send.
_SUBSET_LUA = f"""
function envoy_on_request(handle)
  local hint = handle:headers():get("{SUBSET_TEST_HEADER}")
  if hint == nil then return end
  local endpoints = {{}}
  for endpoint in string.gmatch(hint, "[^,]+") do table.insert(endpoints, endpoint) end
  handle:streamInfo():dynamicMetadata():set("{protocol.SUBSET_NAMESPACE}", "{protocol.SUBSET}", endpoints)
end
"""


@dataclass(frozen=True)
class PickerAddress:
    """Where Envoy dials the picker; `tls`: over TLS accepting any certificate, as gateways dial GIE's
    pickers (an empty validation context: the picker's certificate is self-signed), else plaintext."""

    port: int
    tls: bool = False


def bootstrap(
    profile: Profile,
    listen_port: int,
    admin_port: int,
    picker: PickerAddress,
    pods: list[str],
    fail_open: bool,
    als: int | None = None,
    timeout: str = "10s",
) -> dict[str, Any]:
    """The Envoy bootstrap (a dict for YAML); `pods`: the pool's `ip:port`s (override_host's members);
    `als`: a gRPC access-log service on 127.0.0.1 (graystack's, on its xDS port), as a gateway's EnvoyProxy
    ALS sink sends its log; `timeout`: the route's, for a whole answer ("0s": none)."""
    ext_proc = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": "10s"},
        "failure_mode_allow": fail_open,
        "status_on_error": {"code": 503},
        "message_timeout": "10s",
        "processing_mode": {
            "request_header_mode": "SEND",
            "response_header_mode": "SEND",
            "request_body_mode": "FULL_DUPLEX_STREAMED",
            "response_body_mode": "FULL_DUPLEX_STREAMED",
            "request_trailer_mode": "SEND",
            "response_trailer_mode": "SEND",
        },
        "metadata_options": {
            "forwarding_namespaces": {"untyped": [protocol.LB_NAMESPACE, protocol.SUBSET_NAMESPACE]},
            "receiving_namespaces": {"untyped": [protocol.LB_NAMESPACE]},
        },
    }
    http_filters = [
        {
            "name": "envoy.filters.http.lua",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": _SUBSET_LUA},
            },
        },
        *([{"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc}] if profile in PICKED else []),
        {
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
        },
    ]
    route = {
        "cluster": "pool",
        "timeout": timeout,
        "retry_policy": {"retry_on": "connect-failure,refused-stream,reset", "num_retries": 2},
    }
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {
            "virtual_hosts": [
                {"name": "pool", "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": route}]}
            ]
        },
        "http_filters": http_filters,
    }
    clusters = [*_pools(profile, pods), _picker_cluster(picker)]
    if als is not None:
        manager["access_log"] = [_access_log()]
        clusters.append(
            {
                "name": "als",
                "type": "STATIC",
                "typed_extension_protocol_options": _HTTP2,
                "load_assignment": {
                    "cluster_name": "als",
                    "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address("127.0.0.1", als)}}]}],
                },
            }
        )
    listener = {
        "name": "gateway",
        "address": _address("127.0.0.1", listen_port),
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }
    return {
        "admin": {"address": _address("127.0.0.1", admin_port)},
        "static_resources": {
            "listeners": [listener],
            "clusters": clusters,
        },
    }


_HTTP2 = {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}},
    }
}


def _access_log() -> dict[str, Any]:
    return {
        "name": "envoy.access_loggers.http_grpc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig",
            "common_config": {
                "log_name": names.ANSWER_LOG,
                "grpc_service": {"envoy_grpc": {"cluster_name": "als"}},
                "transport_api_version": "V3",
                "buffer_flush_interval": "0.1s",
            },
            # the variant the picker marked each request with: a model variant's answers are placed by it
            "additional_request_headers_to_log": [names.ROUTED_HEADER],
        },
    }


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _pools(profile: Profile, pods: list[str]) -> list[dict[str, Any]]:
    """The clusters the route's `pool` names: one, or an aggregate over the override_host one."""
    if profile != "override_host_aggregate":
        return [_pool(profile, pods, "pool")]
    aggregate = {
        "name": "pool",
        "connect_timeout": "1s",
        "lb_policy": "CLUSTER_PROVIDED",
        "cluster_type": {
            "name": "envoy.clusters.aggregate",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig",
                "clusters": ["members"],
            },
        },
    }
    return [aggregate, _pool("override_host", pods, "members")]


def _pool(profile: Profile, pods: list[str], name: str) -> dict[str, Any]:
    if profile == "original_dst":
        return {
            "name": name,
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": "1s",
            "original_dst_lb_config": {"use_http_header": True, "http_header_name": protocol.DESTINATION},
        }
    endpoints = [
        {"endpoint": {"address": _address(host, int(port))}}
        for host, _, port in (pod.rpartition(":") for pod in pods)
    ]
    if profile != "override_host":
        return {
            "name": name,
            "type": "STATIC",
            "connect_timeout": "1s",
            "lb_policy": profile.upper(),
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
        }
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
        "load_balancing_policy": override_host_policy(),
    }


def override_host_policy(namespace: str = protocol.LB_NAMESPACE) -> dict[str, Any]:
    """Envoy's `override_host` balancing: the pod in `namespace`'s metadata (the picker's pick), the pod
    that served written back into `envoy.lb`, round robin where no pick is given."""
    return {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.override_host",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
                        "override_host_sources": [
                            {"metadata": {"key": namespace, "path": [{"key": protocol.DESTINATION}]}}
                        ],
                        "selected_host_key": {
                            "key": protocol.LB_NAMESPACE,
                            "path": [{"key": protocol.SERVED}],
                        },
                        "fallback_policy": {
                            "policies": [
                                {
                                    "typed_extension_config": {
                                        "name": "envoy.load_balancing_policies.round_robin",
                                        "typed_config": {
                                            "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
                                        },
                                    }
                                }
                            ]
                        },
                    },
                }
            }
        ]
    }


def _picker_cluster(picker: PickerAddress) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": "epp",
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": "epp",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address("127.0.0.1", picker.port)}}]}],
        },
        "typed_extension_protocol_options": _HTTP2,
    }
    if picker.tls:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"alpn_protocols": ["h2"], "validation_context": {}},
            },
        }
    return cluster


class DataPlane:
    """Envoy started on `bootstrap(...)`; `url`: the gateway's listener."""

    def __init__(
        self,
        envoy: str,
        folder: Path,
        profile: Profile,
        picker: PickerAddress,
        pods: list[str],
        fail_open: bool = False,
        als: int | None = None,
        timeout: str = "10s",
    ) -> None:
        self.listen_port, self.admin_port = free_port(), free_port()
        self.config = folder / f"envoy-{profile}.yaml"
        config = bootstrap(profile, self.listen_port, self.admin_port, picker, pods, fail_open, als, timeout)
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        self._envoy, self._folder = envoy, folder
        self.url = f"http://127.0.0.1:{self.listen_port}"
        self.process: ManagedProcess | None = None

    def start(self) -> DataPlane:
        argv = [self._envoy, "-c", str(self.config), "--disable-hot-restart", "--log-level", "warning"]
        self.process = start_process("envoy-gie", argv, self._folder)
        self.process.wait_healthy(self._ready, 30, "Envoy's listener")
        return self

    def _ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.admin_port}/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self, part: str = "ext_proc") -> str:
        """Envoy's counters whose name holds `part`: what a failure message says of the picker's streams."""
        found = httpx.get(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5).text.splitlines()
        return "\n".join(line for line in found if part in line)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
