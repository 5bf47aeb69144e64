"""The variants' upstreams as one static Envoy answering every request at once with its listener's variant
(`x-graystack-variant`), for tests that send thousands of requests through the gateway: a Python stand-in
answers a few hundred a second on a small machine, Envoy's direct responses several times that. Stopped by
PID with the stack."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path

import yaml

from gateway import names
from graystack.local.gateway_stack import VARIANTS, StandIns, answers, default_spec, envoy_argv
from graystack.local.processes import free_port, start_process, wait_until


def _listener(variant: str, port: int) -> dict:
    route = {
        "match": {"prefix": "/"},
        "direct_response": {"status": 200, "body": {"inline_string": "{}"}},
        "response_headers_to_add": [{"header": {"key": names.VARIANT_HEADER, "value": variant}}],
    }
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": variant,
        "route_config": {"virtual_hosts": [{"name": variant, "domains": ["*"], "routes": [route]}]},
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    return {
        "name": variant,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }


class EnvoyUpstreams(StandIns):
    """Both variants' upstreams in one Envoy process, one listener per variant; otherwise StandIns (the
    guard measures nothing)."""

    def __init__(self, envoy: str) -> None:
        super().__init__()
        self.envoy = envoy

    def start(self, ports: Mapping[str, int], logs: Path) -> dict:
        config = {
            "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": free_port()}}},
            "static_resources": {"listeners": [_listener(v, ports[v]) for v in VARIANTS]},
        }
        path = logs.parent / "upstreams-envoy.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        self.running["upstreams-envoy"] = start_process(
            "upstreams-envoy", envoy_argv(self.envoy, path, 1), logs
        )
        for variant in VARIANTS:
            wait_until(partial(answers, ports[variant], "/readyz"), 15, f"{variant}'s upstream listener")
        return default_spec(ports["baseline"], ports["zero-layer"])
