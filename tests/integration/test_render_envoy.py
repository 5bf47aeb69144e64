"""Real Envoy 1.40 (`envoy --mode validate`) takes what Envoy Gateway would make of the objects `graystack render
--gateway envoy-gateway` writes: the EnvoyExtensionPolicy's Lua (compiled at load, so a script error fails
it) and the EnvoyProxy's ALS sink with its CEL match (parsed at load). The translation is written here from
Envoy Gateway v1.9's translator test data (internal/xds/translator/testdata/out/xds-ir/lua.*.yaml and
accesslog-*.yaml at d32f282), not run: Envoy Gateway itself does not run here. Neither does its own Lua
validation (gopher-lua against its mocks), which runs before this. And the match, running in real Envoy,
passes exactly the POSTs on the rollout's routes."""

from __future__ import annotations

import time

import httpx
import pytest
import yaml

from gateway.envoy.answer_filter import answer_script
from gateway.gatewayapi.render.gateways import render
from gateway.gatewayapi.render.options import GatewayRef, RenderOptions, ServiceAddress
from gateway.spec.model import validate_spec
from graystack.local.gateway_stack import envoy_argv
from graystack.local.processes import free_port, start_process
from tests.integration.test_envoy_validate import validate
from tests.unit.test_render import WIDE

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ALS_CONFIG = "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig"
CEL_FILTER = "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter"
HTTP_OPTIONS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def static_cluster(name: str, port: int, http2: bool = False) -> dict:
    cluster = {
        "name": name,
        "type": "STATIC",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}
                            }
                        }
                    ]
                }
            ],
        },
    }
    if http2:  # Envoy Gateway gives an ALS cluster HTTP/2 (gRPC)
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": HTTP_OPTIONS,
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


def as_envoy_gateway_would(objects: list[dict]) -> dict:
    """A bootstrap in Envoy Gateway's shape: each policy's Lua a listener filter, disabled there and enabled
    on its routes (v1.9), the answer log an HTTP gRPC access log with the setting's match."""
    proxy = next(o for o in objects if o["kind"] == "EnvoyProxy")
    setting = proxy["spec"]["telemetry"]["accessLog"]["settings"][1]
    als = setting["sinks"][0]["als"]
    access_log = {
        "name": "envoy.access_loggers.http_grpc",
        "filter": {
            "extension_filter": {
                "name": "envoy.access_loggers.extension_filters.cel",
                "typed_config": {"@type": CEL_FILTER, "expression": setting["matches"][0]},
            }
        },
        "typed_config": {
            "@type": ALS_CONFIG,
            "common_config": {
                "log_name": als["logName"],
                "grpc_service": {"envoy_grpc": {"cluster_name": "accesslog_als_1_0"}},
                "transport_api_version": "V3",
            },
            "additional_request_headers_to_log": als["http"]["requestHeaders"],
        },
    }
    filters, routes = [], []
    for policy in (o for o in objects if o["kind"] == "EnvoyExtensionPolicy"):
        namespace, name = policy["metadata"]["namespace"], policy["metadata"]["name"]
        filter_name = f"envoy.filters.http.lua/envoyextensionpolicy/{namespace}/{name}/lua/0"
        filters.append(
            {
                "name": filter_name,
                "disabled": True,
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                    "default_source_code": {"inline_string": policy["spec"]["lua"][0]["inline"]},
                },
            }
        )
        for ref in policy["spec"]["targetRefs"]:
            routes.append(
                {
                    "name": f"httproute/{namespace}/{ref['name']}/rule/0/match/0/*",
                    "match": {"prefix": f"/{namespace}/{ref['name']}"},
                    "route": {"cluster": f"httproute/{namespace}/{ref['name']}/rule/0"},
                    "typed_per_filter_config": {
                        filter_name: {
                            "@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig",
                            "config": {},
                        }
                    },
                }
            )
    manager = {
        "@type": HCM,
        "stat_prefix": "http-10080",
        "route_config": {
            "name": "infra/eg/http",
            "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": routes}],
        },
        "access_log": [access_log],
        "http_filters": [
            *filters,
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
        ],
    }
    listener = {
        "name": "infra/eg/http",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10080}},
        "default_filter_chain": {
            "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]
        },
    }
    clusters = [static_cluster(route["route"]["cluster"], 8000) for route in routes]
    return {
        "static_resources": {
            "listeners": [listener],
            "clusters": [*clusters, static_cluster("accesslog_als_1_0", 18000, http2=True)],
        }
    }


def rendered_objects(lua: str) -> list[dict]:
    options = RenderOptions(
        ServiceAddress("graystack-gateway-admin", "graystack", 18000), GatewayRef("infra", "eg"), lua
    )
    return list(render(validate_spec(WIDE), "envoy-gateway", options).objects)


def test_envoy_takes_the_rendered_lua_and_access_log(envoy_binary, tmp_path):
    bootstrap = as_envoy_gateway_would(rendered_objects(answer_script()))
    assert (
        len(
            bootstrap["static_resources"]["listeners"][0]["default_filter_chain"]["filters"][0][
                "typed_config"
            ]["http_filters"]
        )
        == 3
    )
    result = validate(envoy_binary, yaml.safe_dump(bootstrap), tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout


@pytest.mark.parametrize(
    ("broken", "says"),
    [("lua", "script load error"), ("match", "Not able to parse filter expression")],
)
def test_the_check_bites(envoy_binary, tmp_path, broken, says):
    objects = rendered_objects(answer_script() + ("\nend\n" if broken == "lua" else ""))
    if broken == "match":
        setting = objects[0]["spec"]["telemetry"]["accessLog"]["settings"][1]
        setting["matches"] = [setting["matches"][0] + " &&"]
    result = validate(envoy_binary, yaml.safe_dump(as_envoy_gateway_would(objects)), tmp_path)
    assert result.returncode != 0
    assert says in result.stderr + result.stdout


def test_the_match_passes_only_posts_on_the_rollouts_routes(envoy_binary, tmp_path):
    """The rendered match, as Envoy Gateway sets it on the access log, in a running Envoy: each route
    answers directly, and a file log in the ALS sink's place shows which requests the match passed."""
    bootstrap = as_envoy_gateway_would(rendered_objects(answer_script()))
    listener = bootstrap["static_resources"]["listeners"][0]
    manager = listener["default_filter_chain"]["filters"][0]["typed_config"]
    routes = manager["route_config"]["virtual_hosts"][0]["routes"]
    routes.append({"name": "httproute/serving/other/rule/0/match/0/*", "match": {"prefix": "/"}, "route": {}})
    for route in routes:
        del route["route"]
        route["direct_response"] = {"status": 200, "body": {"inline_string": "{}"}}
    log = tmp_path / "answers.log"
    [access_log] = manager["access_log"]
    access_log["name"] = "envoy.access_loggers.file"
    access_log["typed_config"] = {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
        "path": str(log),
        "log_format": {"text_format_source": {"inline_string": "%REQ(:METHOD)% %ROUTE_NAME%\n"}},
    }
    port, admin = free_port(), free_port()
    listener["address"]["socket_address"]["port_value"] = port
    bootstrap["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}}
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(bootstrap))
    envoy = start_process("envoy", envoy_argv(envoy_binary, path, 1), tmp_path / "logs")
    try:
        envoy.wait_healthy(
            lambda: httpx.get(f"http://127.0.0.1:{admin}/ready").raise_for_status(), 30, "Envoy"
        )
        for method in ("POST", "GET"):
            for where in ("/serving/llm", "/batch/llm", "/serving/other"):
                assert httpx.request(method, f"http://127.0.0.1:{port}{where}", json={}).status_code == 200
        expected = [
            "POST httproute/batch/llm/rule/0/match/0/*",
            "POST httproute/serving/llm/rule/0/match/0/*",
        ]
        deadline = time.monotonic() + 15  # Envoy flushes a file log every second
        while (sorted(log.read_text().splitlines()) if log.exists() else []) != expected:
            assert time.monotonic() < deadline, (
                log.read_text() if log.exists() else "no log"
            ) + envoy.log_tail()
            time.sleep(0.2)
    finally:
        envoy.stop()
