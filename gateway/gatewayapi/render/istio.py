"""The objects for Istio, whose Gateway API gateways are Envoy proxies that istiod programs:

- an extension provider in the mesh config, `envoyHttpAls`: graystack's receiver (its Service's full host
  name and port) and the log's name, `names.ANSWER_LOG`. The mesh config is one object of the user's
  (istiod's Helm values `meshConfig`, an IstioOperator's `spec.meshConfig`, or the `mesh` key of the
  ConfigMap istio-system/istio), so it is printed as a snippet to merge, never as an object that would
  replace theirs;
- a `Telemetry` (telemetry.istio.io/v1) in the Gateway's namespace whose `targetRefs` name the Gateway
  (Istio >= 1.22), turning the provider on for that Gateway's proxies alone, for POSTs.

No answer filter: Istio takes Lua only as an EnvoyFilter, its break-glass API that patches the generated
configuration (for every route of the Gateway, not the rollout's alone), which graystack does not render;
the notes say what is measured without it. Istio's CRDs are not vendored here, so these objects' shape is
checked by unit tests only, against Istio's API as documented (mesh config `EnvoyHttpGrpcV3LogProvider`,
Telemetry `targetRefs` and `accessLogging`).
"""

from __future__ import annotations

from gateway import names
from gateway.gatewayapi.render.common import (
    Object,
    Rendered,
    dumped,
    gateway_api,
    logged_request_headers,
    measured,
    metadata,
)
from gateway.gatewayapi.render.options import RenderOptions
from gateway.spec.model import RolloutSpec

PROVIDER = names.ANSWER_LOG  # the extension provider's name, which the Telemetry selects
TELEMETRY_NAME = "graystack-answers"  # one per Gateway: it turns one provider on
ONLY_POSTS = "request.method == 'POST'"


def extension_provider(spec: RolloutSpec, options: RenderOptions) -> Object:
    als: Object = {"service": options.als.host, "port": options.als.port, "logName": names.ANSWER_LOG}
    headers = logged_request_headers(spec)
    if headers:
        als["additionalRequestHeadersToLog"] = headers
    return {"name": PROVIDER, "envoyHttpAls": als}


def mesh_config(spec: RolloutSpec, options: RenderOptions) -> Object:
    """The snippet to merge into the mesh config (as istiod's Helm values and an IstioOperator spell it)."""
    return {"meshConfig": {"extensionProviders": [extension_provider(spec, options)]}}


def telemetry(options: RenderOptions) -> Object:
    gateway = options.gateway
    return {
        "apiVersion": "telemetry.istio.io/v1",
        "kind": "Telemetry",
        "metadata": metadata(TELEMETRY_NAME, gateway.namespace),
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}],
            "accessLogging": [{"providers": [{"name": PROVIDER}], "filter": {"expression": ONLY_POSTS}}],
        },
    }


def rendered(spec: RolloutSpec, options: RenderOptions) -> Rendered:
    gateway, als = options.gateway, options.als
    routes = ", ".join(f"{route.namespace}/{route.name}" for route in gateway_api(spec).routes)
    snippet = dumped(mesh_config(spec, options))
    notes = [
        f"graystack render --gateway istio: rollout {spec.name}, HTTPRoutes {routes}, Gateway "
        f"{gateway.namespace}/{gateway.name}. Apply the Telemetry below (kubectl apply -f), and by hand:",
        "",
        f"1. The answer log's provider: graystack's receiver (Service {als.namespace}/{als.name}, port "
        f"{als.port}, log {names.ANSWER_LOG}). Merge it into your mesh config (istiod's Helm values, an "
        "IstioOperator's spec, or the mesh key of the ConfigMap istio-system/istio, there without the "
        "meshConfig level):",
        "\n".join(f"    {line}" for line in snippet.splitlines()),
        f"2. The Telemetry {TELEMETRY_NAME} turns the provider on for the Gateway's proxies alone (targetRefs: "
        "Istio >= 1.22), for POSTs: every POST through the Gateway, on any of its routes, reaches graystack, "
        "which counts answers from no variant's endpoints apart. Two Telemetry resources on one Gateway do "
        "not combine: where one of yours targets it, add this accessLogging entry to yours instead.",
        "3. No answer filter: Istio would take graystack's Lua only as an EnvoyFilter (on every route of the "
        "Gateway), which graystack does not render.",
        "",
    ]
    return Rendered(tuple([*notes, *measured(answer_filter=False)]), (telemetry(options),))
