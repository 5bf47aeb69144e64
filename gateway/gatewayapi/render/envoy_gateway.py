"""The objects for Envoy Gateway (v1.9, the CRDs under tests/crds/envoy-gateway/):

- an `EnvoyProxy` whose access log sends graystack the answers of the rollout's routes over gRPC (an ALS
  sink: `names.ANSWER_LOG`, type HTTP, the receiver's Service as its backendRef). It attaches to the one
  Gateway through the Gateway's own `spec.infrastructure.parametersRef` (the EnvoyProxy in the Gateway's
  namespace), not the GatewayClass's, so the class's other Gateways are untouched; `mergeType:
  StrategicMerge` lays it over the class's EnvoyProxy instead of replacing it (unset, a Gateway's EnvoyProxy
  replaces the class's wholly). Setting `accessLog` ends Envoy Gateway's default log to stdout, so a
  setting of its own keeps that one.
- per namespace of the routes, an `EnvoyExtensionPolicy` that runs the answer filter's Lua on them
  (`Inline`: no ConfigMap to keep beside it), `mergeType: StrategicMerge` so that a policy of the user's on
  the Gateway still applies to these routes (unset, the most specific policy alone takes effect). Since
  v1.9 Envoy Gateway runs Lua only with `extensionApis.enableLua: true` in its own configuration.

Only POSTs on the rollout's routes are logged: a CEL match on the method and on the route's name, which
Envoy Gateway gives as `httproute/<namespace>/<name>/rule/<i>/match/<j>/...` (read in its v1.9 source, not
an API: were it renamed, no answer would arrive and the split proof would hold the rollout, never pass).
"""

from __future__ import annotations

import json
from collections import defaultdict

from gateway import names
from gateway.gatewayapi.render.common import (
    Object,
    Rendered,
    gateway_api,
    logged_request_headers,
    measured,
    metadata,
)
from gateway.gatewayapi.render.options import RenderOptions
from gateway.spec.model import RolloutSpec

API_VERSION = "gateway.envoyproxy.io/v1alpha1"
GROUP = "gateway.envoyproxy.io"
ROUTE_GROUP = "gateway.networking.k8s.io"
PROXY_NAME = "graystack-answers"  # one per Gateway: it carries one access log
ENABLE_LUA = "extensionApis:\n  enableLua: true"


def answer_log_match(spec: RolloutSpec) -> str:
    """The CEL expression an answer's entry must meet: a POST, on one of the rollout's routes."""
    routes = " || ".join(
        f"xds.route_name.startsWith('httproute/{route.namespace}/{route.name}/')"
        for route in gateway_api(spec).routes
    )
    return f"request.method == 'POST' && ({routes})"


def envoy_proxy(spec: RolloutSpec, options: RenderOptions) -> Object:
    als: Object = {
        "type": "HTTP",
        "logName": names.ANSWER_LOG,
        "backendRefs": [
            {
                "group": "",
                "kind": "Service",
                "name": options.als.name,
                "namespace": options.als.namespace,
                "port": options.als.port,
            }
        ],
    }
    headers = logged_request_headers(spec)
    if headers:
        als["http"] = {"requestHeaders": headers}
    default_log = {"sinks": [{"type": "File", "file": {"path": "/dev/stdout"}}]}
    answers = {"type": "Route", "matches": [answer_log_match(spec)], "sinks": [{"type": "ALS", "als": als}]}
    return {
        "apiVersion": API_VERSION,
        "kind": "EnvoyProxy",
        "metadata": metadata(PROXY_NAME, options.gateway.namespace),
        "spec": {
            "mergeType": "StrategicMerge",
            "telemetry": {"accessLog": {"settings": [default_log, answers]}},
        },
    }


def gateway_patch() -> Object:
    """The merge patch that names the EnvoyProxy in the Gateway's own parametersRef."""
    ref = {"group": GROUP, "kind": "EnvoyProxy", "name": PROXY_NAME}
    return {"spec": {"infrastructure": {"parametersRef": ref}}}


def extension_policies(spec: RolloutSpec, lua: str) -> list[Object]:
    """One policy per namespace of the routes (a policy targets routes of its own namespace only)."""
    by_namespace: dict[str, list[str]] = defaultdict(list)
    for route in gateway_api(spec).routes:
        by_namespace[route.namespace].append(route.name)
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "EnvoyExtensionPolicy",
            "metadata": metadata(f"graystack-{spec.name}-answers", namespace),
            "spec": {
                "targetRefs": [{"group": ROUTE_GROUP, "kind": "HTTPRoute", "name": name} for name in routes],
                "mergeType": "StrategicMerge",
                "lua": [{"type": "Inline", "inline": lua}],
            },
        }
        for namespace, routes in by_namespace.items()
    ]


def rendered(spec: RolloutSpec, options: RenderOptions) -> Rendered:
    gateway, als = options.gateway, options.als
    routes = ", ".join(f"{route.namespace}/{route.name}" for route in gateway_api(spec).routes)
    patch = json.dumps(gateway_patch(), separators=(",", ":"))
    notes = [
        f"graystack render --gateway envoy-gateway: rollout {spec.name}, HTTPRoutes {routes}, Gateway "
        f"{gateway.namespace}/{gateway.name}. Apply the objects below (kubectl apply -f), and by hand:",
        "",
        f"1. The answer log. The EnvoyProxy {PROXY_NAME} sends every POST answered on these routes to "
        f"graystack's receiver (Service {als.namespace}/{als.name}, port {als.port}, log {names.ANSWER_LOG}). "
        "Attach it to the Gateway itself, laid over its GatewayClass's EnvoyProxy (mergeType StrategicMerge); "
        "where the Gateway names an EnvoyProxy of yours already, add this one's access-log settings to "
        "yours instead:",
        f"    kubectl patch gateway {gateway.name} -n {gateway.namespace} --type merge -p '{patch}'",
    ]
    objects = [envoy_proxy(spec, options)]
    if options.answer_filter is not None:
        notes += [
            "2. The answer filter. The EnvoyExtensionPolicy runs graystack's Lua on these routes. Envoy "
            "Gateway >= 1.9 runs Lua only where its own configuration enables it (the EnvoyGateway "
            "config: ConfigMap envoy-gateway-config, or the Helm value config.envoyGateway):",
            "\n".join(f"    {line}" for line in ENABLE_LUA.splitlines()),
        ]
        objects += extension_policies(spec, options.answer_filter)
    else:
        notes.append("2. No answer filter (--no-answer-filter): no EnvoyExtensionPolicy.")
    return Rendered(tuple([*notes, "", *measured(options.answer_filter is not None)]), tuple(objects))
