"""`graystack render` (gateway/gatewayapi/render/): the objects a user applies to their own gateway. Envoy
Gateway's are validated against its vendored CRDs (tests/crds/envoy-gateway/), schema and CEL rules, as an
API server with them installed would (tests/support/kube_crds.py); the Gateway patch against Gateway API's.
Istio's CRDs are not vendored here: its objects' shape is checked field by field, against Istio's API as
documented (mesh config EnvoyHttpGrpcV3LogProvider, Telemetry targetRefs and accessLogging). The examples on
the gateways' docs pages (docs/gateways/) are what render writes."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gateway import names
from gateway.envoy.answer_filter import answer_script
from gateway.gatewayapi.render import envoy_gateway, istio
from gateway.gatewayapi.render.common import rendered_yaml
from gateway.gatewayapi.render.gateways import GATEWAYS, render
from gateway.gatewayapi.render.options import (
    GatewayRef,
    RenderError,
    RenderOptions,
    ServiceAddress,
    gateway_ref,
    service_address,
)
from gateway.spec.model import validate_spec
from graystack.cli import main
from graystack.cli.render import GATEWAY_KINDS
from tests.support.kube_crds import defaulted, problems

SPEC = {
    "name": "llm",
    "variants": {"v1": {"service": "llm-v1", "port": 8000}, "v2": {"service": "llm-v2", "port": 8000}},
    "routing": {"weights": {"v1": 95, "v2": 5}},
    "gateway_api": {
        "routes": [{"name": "llm", "namespace": "serving"}],
        "backends": {
            "v1": {"name": "llm-v1", "port": 8000},
            "v2": {"kind": "InferencePool", "name": "llm-v2"},
        },
    },
}
# two routes in one namespace, one in another, and a header segment
WIDE = {
    **SPEC,
    "routing": {"weights": {"v1": 95, "v2": 5}, "rules": [{"value": "beta", "variant": "v2"}]},
    "gateway_api": {
        **SPEC["gateway_api"],
        "routes": [
            {"name": "llm", "namespace": "serving"},
            {"name": "llm-eu", "namespace": "serving"},
            {"name": "llm", "namespace": "batch"},
        ],
    },
}
ALS = ServiceAddress("graystack-gateway-admin", "graystack", 18000)
GATEWAY = GatewayRef("infra", "eg")
LUA = answer_script()
ARGS = ["--als", "graystack-gateway-admin.graystack:18000", "--gateway-name", "infra/eg"]


def options(answer_filter: str | None = LUA) -> RenderOptions:
    return RenderOptions(ALS, GATEWAY, answer_filter)


def valid(obj: dict) -> None:
    """As the API server would take it: schema and CEL rules, as written and with its defaults."""
    assert problems(obj["kind"], obj) is None
    assert problems(obj["kind"], defaulted(obj["kind"], obj)) is None


@pytest.mark.parametrize("raw", [SPEC, WIDE])
@pytest.mark.parametrize("lua", [LUA, None])
def test_every_envoy_gateway_object_is_valid_against_its_crd(raw, lua):
    rendered = render(validate_spec(raw), "envoy-gateway", options(lua))
    kinds = [obj["kind"] for obj in rendered.objects]
    assert kinds[0] == "EnvoyProxy"
    assert set(kinds[1:]) == ({"EnvoyExtensionPolicy"} if lua else set())
    for obj in rendered.objects:
        valid(obj)


@pytest.mark.parametrize(
    ("kind", "break_it", "message"),
    [
        (
            "EnvoyProxy",
            lambda o: o["spec"]["telemetry"]["accessLog"]["settings"][1]["sinks"][0]["als"].pop(
                "backendRefs"
            ),
            "must have at least one backend in backendRefs",
        ),
        (
            "EnvoyProxy",
            lambda o: o["spec"]["telemetry"]["accessLog"]["settings"][1]["sinks"][0].update(type="File"),
            "If AccessLogSink type is ALS, als field needs to be set.",
        ),
        (
            "EnvoyExtensionPolicy",
            lambda o: o["spec"]["lua"][0].update(type="ValueRef"),
            "Exactly one of inline or valueRef must be set with correct type.",
        ),
        (
            "EnvoyExtensionPolicy",
            lambda o: o["spec"]["targetRefs"][0].update(group="gateway.envoyproxy.io"),
            "this policy can only have a targetRefs[*].group of gateway.networking.k8s.io",
        ),
    ],
)
def test_the_crd_check_bites(kind, break_it, message):
    rendered = render(validate_spec(SPEC), "envoy-gateway", options())
    obj = copy.deepcopy(next(o for o in rendered.objects if o["kind"] == kind))
    break_it(obj)
    assert message in (problems(kind, defaulted(kind, obj)) or "")


def test_the_access_log_goes_to_graystacks_receiver_for_the_rollouts_routes_only():
    proxy = envoy_gateway.envoy_proxy(validate_spec(WIDE), options())
    assert proxy["metadata"]["namespace"] == "infra"  # the Gateway's: its parametersRef is local
    assert proxy["spec"]["mergeType"] == "StrategicMerge"  # over the GatewayClass's, not instead of it
    default_log, answers = proxy["spec"]["telemetry"]["accessLog"]["settings"]
    assert default_log["sinks"] == [{"type": "File", "file": {"path": "/dev/stdout"}}]
    [sink] = answers["sinks"]
    assert sink["type"] == "ALS"
    assert sink["als"] == {
        "type": "HTTP",
        "logName": names.ANSWER_LOG,  # the only name the receiver keeps (gateway/answers/receiver.py)
        "backendRefs": [
            {
                "group": "",
                "kind": "Service",
                "name": "graystack-gateway-admin",
                "namespace": "graystack",
                "port": 18000,
            }
        ],
        "http": {"requestHeaders": ["x-client-type"]},  # the segment's header
    }
    assert answers["type"] == "Route"
    assert answers["matches"] == [
        "request.method == 'POST' && (xds.route_name.startsWith('httproute/serving/llm/') || "
        "xds.route_name.startsWith('httproute/serving/llm-eu/') || "
        "xds.route_name.startsWith('httproute/batch/llm/'))"
    ]


def test_without_segments_no_header_is_logged():
    proxy = envoy_gateway.envoy_proxy(validate_spec(SPEC), options())
    assert "http" not in proxy["spec"]["telemetry"]["accessLog"]["settings"][1]["sinks"][0]["als"]
    provider = istio.extension_provider(validate_spec(SPEC), options())
    assert "additionalRequestHeadersToLog" not in provider["envoyHttpAls"]


def test_where_graystacks_picker_serves_the_pool_the_variant_it_marked_is_logged():
    spec = validate_spec({**WIDE, "endpoint_picker": {"pool": "llm", "namespace": "serving"}})
    proxy = envoy_gateway.envoy_proxy(spec, options())
    logged = ["x-client-type", names.ROUTED_HEADER]  # the segment's, then the picker's mark
    assert proxy["spec"]["telemetry"]["accessLog"]["settings"][1]["sinks"][0]["als"]["http"] == {
        "requestHeaders": logged
    }
    assert (
        istio.extension_provider(spec, options())["envoyHttpAls"]["additionalRequestHeadersToLog"] == logged
    )


def test_the_gateway_patch_names_the_envoy_proxy_and_keeps_the_gateway_valid():
    proxy = envoy_gateway.envoy_proxy(validate_spec(SPEC), options())
    patch = envoy_gateway.gateway_patch()
    ref = patch["spec"]["infrastructure"]["parametersRef"]
    assert (ref["group"], ref["kind"], ref["name"]) == (
        "gateway.envoyproxy.io",
        "EnvoyProxy",
        proxy["metadata"]["name"],
    )
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "eg", "namespace": "infra"},
        "spec": {"gatewayClassName": "eg", "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]},
    }
    gateway["spec"]["infrastructure"] = patch["spec"]["infrastructure"]  # a merge patch, one level deep
    valid(gateway)


def test_the_extension_policy_runs_the_answer_filters_script_on_the_rollouts_routes():
    policies = envoy_gateway.extension_policies(validate_spec(WIDE), LUA)
    by_namespace = {p["metadata"]["namespace"]: p["spec"] for p in policies}
    assert set(by_namespace) == {"serving", "batch"}  # a policy targets routes of its own namespace only
    assert [ref["name"] for ref in by_namespace["serving"]["targetRefs"]] == ["llm", "llm-eu"]
    assert [ref["name"] for ref in by_namespace["batch"]["targetRefs"]] == ["llm"]
    for spec in by_namespace.values():
        assert {ref["kind"] for ref in spec["targetRefs"]} == {"HTTPRoute"}
        assert spec["lua"] == [{"type": "Inline", "inline": answer_script()}]
        assert spec["mergeType"] == "StrategicMerge"  # a Gateway-level policy of the user's still applies


def test_the_yaml_carries_the_script_byte_for_byte_and_says_lua_must_be_enabled():
    text = rendered_yaml(render(validate_spec(SPEC), "envoy-gateway", options()))
    notes = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    policy = next(doc for doc in documents if doc["kind"] == "EnvoyExtensionPolicy")
    assert policy["spec"]["lua"][0]["inline"] == LUA
    assert "inline: |" in text  # a literal block: the applied YAML reads as the script
    assert "enableLua: true" in notes
    assert "Envoy Gateway >= 1.9" in notes
    assert "kubectl patch gateway eg -n infra --type merge" in notes
    assert "Measured by the answer filter" in notes
    assert "Not measured" not in notes


def test_without_the_answer_filter_the_notes_say_what_is_not_measured():
    rendered = render(validate_spec(SPEC), "envoy-gateway", options(None))
    assert [obj["kind"] for obj in rendered.objects] == ["EnvoyProxy"]
    notes = " ".join(rendered.notes)
    assert "Not measured per answer (no answer filter): time to first token, inter-token latency" in notes
    assert "status, duration" in notes
    assert "upstream host" in notes


def test_istio_gets_a_provider_to_merge_and_a_telemetry_for_the_gateway():
    spec = validate_spec(WIDE)
    mesh = istio.mesh_config(spec, options())
    [provider] = mesh["meshConfig"]["extensionProviders"]
    assert provider == {
        "name": names.ANSWER_LOG,
        "envoyHttpAls": {
            "service": "graystack-gateway-admin.graystack.svc.cluster.local",  # Istio wants the full host
            "port": 18000,
            "logName": names.ANSWER_LOG,
            "additionalRequestHeadersToLog": ["x-client-type"],
        },
    }
    rendered = render(spec, "istio", options())
    [telemetry] = rendered.objects  # no EnvoyFilter: the answer filter is never attached on Istio
    assert telemetry["apiVersion"] == "telemetry.istio.io/v1"
    assert telemetry["kind"] == "Telemetry"
    assert telemetry["metadata"]["namespace"] == "infra"  # targetRefs name a Gateway of the same namespace
    assert "selector" not in telemetry["spec"]  # Istio takes one of selector and targetRefs
    assert telemetry["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "eg"}
    ]
    [logging] = telemetry["spec"]["accessLogging"]
    assert logging["providers"] == [{"name": provider["name"]}]
    assert logging["filter"] == {"expression": "request.method == 'POST'"}
    notes = " ".join(rendered.notes)
    assert "EnvoyFilter" in notes
    assert "Not measured per answer" in notes


def test_istios_mesh_config_snippet_in_the_notes_is_the_provider():
    text = rendered_yaml(render(validate_spec(SPEC), "istio", options()))
    snippet = [line[6:] for line in text.splitlines() if line.startswith("#     ")]
    assert yaml.safe_load("\n".join(snippet)) == istio.mesh_config(validate_spec(SPEC), options())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "graystack-gateway-admin.graystack:18000",
            ServiceAddress("graystack-gateway-admin", "graystack", 18000),
        ),
        ("gs.ops.svc:9000", ServiceAddress("gs", "ops", 9000)),
        ("gs.ops.svc.corp.example:9000", ServiceAddress("gs", "ops", 9000, "corp.example")),
    ],
)
def test_als_addresses(text, expected):
    assert service_address(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("graystack:18000", "name it with its namespace"),
        ("10.0.0.5:18000", "received by a Service"),
        ("gs.ops.cluster.local:18000", "SERVICE.NAMESPACE[.svc[.DOMAIN]]:PORT"),
        ("gs.ops", "a port 1-65535"),
        ("gs.ops:0", "a port 1-65535"),
        ("gs.ops:65536", "a port 1-65535"),
        ("GS.ops:80", "received by a Service"),
    ],
)
def test_bad_als_addresses_are_refused_naming_the_option(text, says):
    with pytest.raises(RenderError, match="^" + re.escape(f"--als {text!r}: ")) as error:
        service_address(text)
    assert says in str(error.value)


@pytest.mark.parametrize("text", ["eg", "infra/", "/eg", "Infra/eg", "infra/eg/x"])
def test_bad_gateway_names_are_refused(text):
    with pytest.raises(RenderError, match=r"^--gateway-name "):
        gateway_ref(text)


def test_a_spec_without_gateway_api_is_refused():
    spec = validate_spec({k: v for k, v in SPEC.items() if k != "gateway_api"})
    with pytest.raises(RenderError, match="no gateway_api section"):
        render(spec, "istio", options())


def test_the_cli_knows_every_gateway():
    assert tuple(GATEWAYS) == GATEWAY_KINDS


def write_spec(tmp_path, raw: dict) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("kind", GATEWAY_KINDS)
def test_the_cli_prints_the_objects(tmp_path, kind):
    result = CliRunner().invoke(
        main, ["render", "--spec", write_spec(tmp_path, SPEC), "--gateway", kind, *ARGS]
    )
    assert result.exit_code == 0, result.output
    expected = render(validate_spec(SPEC), kind, options())
    assert [doc for doc in yaml.safe_load_all(result.output) if doc] == list(expected.objects)
    assert result.output == rendered_yaml(expected)


def test_the_cli_leaves_the_answer_filter_out(tmp_path):
    args = [
        "render",
        "--spec",
        write_spec(tmp_path, SPEC),
        "--gateway",
        "envoy-gateway",
        *ARGS,
        "--no-answer-filter",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert [doc["kind"] for doc in yaml.safe_load_all(result.output) if doc] == ["EnvoyProxy"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"gateway": "nginx"}, "Invalid value for '--gateway'"),
        (
            {"als": "graystack:18000"},
            "--als 'graystack:18000': graystack's answer log is received by a Service",
        ),
        ({"gateway-name": "eg"}, "--gateway-name 'eg': expected NAMESPACE/NAME"),
        ({"spec": "missing.yaml"}, "--spec: "),
        ({"spec": "no-gateway-api"}, "has no gateway_api section"),
        ({"spec": "invalid"}, "--spec: "),
    ],
)
def test_the_cli_refuses_bad_input_naming_it(tmp_path, change, says):
    words = {"spec": write_spec(tmp_path, SPEC), "gateway": "istio", "als": ARGS[1], "gateway-name": ARGS[3]}
    words.update(change)
    if words["spec"] == "no-gateway-api":
        words["spec"] = write_spec(tmp_path, {k: v for k, v in SPEC.items() if k != "gateway_api"})
    elif words["spec"] == "invalid":
        words["spec"] = write_spec(tmp_path, {**SPEC, "name": "Not_A_Label"})
    elif words["spec"] == "missing.yaml":
        words["spec"] = str(tmp_path / "missing.yaml")
    result = CliRunner().invoke(main, ["render", *(w for k, v in words.items() for w in (f"--{k}", v))])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "---" not in result.output


GATEWAY_DOCS = Path(__file__).resolve().parents[2] / "docs" / "gateways"


def yaml_blocks(page: str) -> list:
    """The ```yaml blocks of a docs page, parsed."""
    text = (GATEWAY_DOCS / page).read_text()
    return [
        yaml.safe_load(block.split("\n", 1)[1])
        for block in text.split("```")[1::2]
        if block.startswith("yaml")
    ]


SEGMENTED = {**SPEC, "routing": WIDE["routing"]}


def test_the_envoy_gateway_page_shows_what_render_writes():
    spec = validate_spec(SEGMENTED)
    proxy, policy, enable_lua = yaml_blocks("envoy-gateway.md")
    assert proxy["spec"] == envoy_gateway.envoy_proxy(spec, options())["spec"]
    [written] = envoy_gateway.extension_policies(spec, LUA)
    assert policy["spec"]["targetRefs"] == written["spec"]["targetRefs"]
    assert policy["spec"]["mergeType"] == written["spec"]["mergeType"]
    assert enable_lua == yaml.safe_load(envoy_gateway.ENABLE_LUA)
    [patch] = [
        note.strip() for note in render(spec, "envoy-gateway", options()).notes if "kubectl patch" in note
    ]
    assert (
        patch in (Path(__file__).resolve().parents[2] / "docs" / "gateways" / "envoy-gateway.md").read_text()
    )


def test_the_istio_page_shows_what_render_writes():
    spec = validate_spec(SEGMENTED)
    mesh, telemetry = yaml_blocks("istio.md")
    assert mesh == istio.mesh_config(spec, options())
    written = istio.telemetry(RenderOptions(ALS, GatewayRef("infra", "llm-gateway")))
    assert telemetry["spec"] == written["spec"]
