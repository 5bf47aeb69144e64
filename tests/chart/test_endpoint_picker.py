"""The chart's Endpoint Picker (issue 37): every gateway replica serves graystack's picker for the user's
InferencePool (the spec's endpoint_picker, filled in from `endpointPicker`), behind a Service the pool's
endpointPickerRef names, with a Role in the pool's namespace. The generic checks (lint, Kubernetes schemas,
non-root, resources, probes) run on ci/endpoint-picker-values.yaml through test_chart.SCENARIOS."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from gateway.spec.endpoint_picker import EndpointPicker
from gateway.spec.model import validate_spec
from graystack.cli import main
from tests.chart.test_chart import KUBERNETES_VERSION, rendered
from tests.support.helm import CHART, Rendered, render, run_helm

SCENARIO = "endpoint-picker-values.yaml"
PROXIES = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}}]


def _gateway(chart: Rendered) -> dict:
    (container,) = chart.named("Deployment", "-gateway")["spec"]["template"]["spec"]["containers"]
    return container


def _spec_data(chart: Rendered) -> dict:
    return yaml.safe_load(chart.named("ConfigMap", "-spec")["data"]["spec.yaml"])


def test_the_rendered_spec_names_the_pool_and_parses_with_graystacks_model() -> None:
    spec = validate_spec(_spec_data(rendered(SCENARIO)))
    assert spec.endpoint_picker == EndpointPicker(
        pool="llm",
        namespace="serving",
        variant_label="track",
        values={"baseline": "stable", "zero-layer": "canary"},
    )


def test_the_pool_namespace_defaults_to_the_releases_and_the_label_to_graystacks() -> None:
    chart = render(
        sets=("endpointPicker.enabled=true", "endpointPicker.pool.name=llm", "networkPolicy.enabled=false")
    )
    spec = validate_spec(_spec_data(chart))
    assert spec.endpoint_picker == EndpointPicker(
        pool="llm", namespace="llm", variant_label="graystack.io/variant"
    )
    (role,) = [r for r in chart.of_kind("Role") if r["metadata"]["name"] == "gs-graystack-epp"]
    assert role["metadata"]["namespace"] == "llm"


def test_every_replica_serves_the_picker_over_tls_on_all_addresses() -> None:
    gateway = _gateway(rendered(SCENARIO))
    assert gateway["args"] == [
        "kube-gateway",
        "--picker-port",
        "9002",
        "--picker-health-port",
        "9003",
        "--picker-host",
        "0.0.0.0",
    ]
    assert "--picker-insecure" not in gateway["args"]  # TLS stays on: a self-signed certificate
    assert not [e for e in gateway["env"] if e["name"].startswith("GRAYSTACK_PICKER_")]
    options = {opt for param in main.commands["kube-gateway"].params for opt in param.opts}
    assert {arg for arg in gateway["args"] if arg.startswith("--")} <= options
    assert {"name": "epp", "containerPort": 9002, "protocol": "TCP"} in gateway["ports"]
    assert {"name": "epp-health", "containerPort": 9003, "protocol": "TCP"} in gateway["ports"]


def test_the_gateways_probes_stay_unless_readiness_is_gated_on_the_picker() -> None:
    """One liveness and one readiness per container: by default the gateway's own (HTTP /healthz on the
    admin port, the xDS port open) stay; gateReadiness swaps readiness alone for the picker's gRPC one."""
    default = _gateway(rendered(""))
    probes = ("startupProbe", "livenessProbe", "readinessProbe")
    picker = _gateway(rendered(SCENARIO))
    assert {p: picker[p] for p in probes} == {p: default[p] for p in probes}
    gated = _gateway(render(SCENARIO, sets=("endpointPicker.gateReadiness=true",)))
    assert gated["readinessProbe"] == {"grpc": {"port": 9003, "service": "readiness"}, "periodSeconds": 5}
    assert gated["livenessProbe"] == default["livenessProbe"]
    assert gated["startupProbe"] == default["startupProbe"]
    kubernetes_validate.validate(
        render(SCENARIO, sets=("endpointPicker.gateReadiness=true",)).named("Deployment", "-gateway"),
        KUBERNETES_VERSION,
        strict=True,
    )


def test_the_picker_service_reaches_every_replica_for_the_pools_endpoint_picker_ref() -> None:
    chart = rendered(SCENARIO)
    epp = chart.named("Service", "-epp")
    assert epp["metadata"]["name"] == "gs-graystack-epp"
    assert epp["spec"]["type"] == "ClusterIP"
    assert epp["spec"]["ports"] == [
        {
            "name": "grpc-ext-proc",
            "port": 9002,
            "targetPort": "epp",
            "protocol": "TCP",
            "appProtocol": "http2",
        }
    ]
    gateway = chart.named("Service", "-gateway")["spec"]["selector"]
    assert epp["spec"]["selector"] == gateway  # every replica: not the leader only
    pods = chart.named("Deployment", "-gateway")["spec"]["template"]["metadata"]["labels"]
    assert epp["spec"]["selector"].items() <= pods.items()
    notes = run_helm(
        "install", "gs", str(CHART), "-n", "llm", "--dry-run=client", "-f", str(CHART / "ci" / SCENARIO)
    ).stdout.split("NOTES:", 1)[1]
    assert "endpointPickerRef: {name: gs-graystack-epp, port: {number: 9002}}" in notes
    assert "accepting any certificate" in notes
    assert "gs-graystack-epp.llm.svc:9002" in notes  # the pool is in another namespace: the ref is local


def _rules(role: dict) -> list[tuple]:
    return [
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"]), tuple(r.get("resourceNames", ())))
        for r in role["rules"]
    ]


def test_a_role_in_the_pools_namespace_reads_the_pool_and_lists_its_pods() -> None:
    chart = rendered(SCENARIO)
    (role,) = [r for r in chart.of_kind("Role") if r["metadata"]["name"] == "gs-graystack-epp"]
    assert role["metadata"]["namespace"] == "serving"
    assert _rules(role) == [
        (("inference.networking.k8s.io",), ("inferencepools",), ("get",), ("llm",)),
        (("",), ("pods",), ("list", "watch"), ()),
    ]
    (binding,) = [b for b in chart.of_kind("RoleBinding") if b["metadata"]["name"] == "gs-graystack-epp"]
    assert binding["metadata"]["namespace"] == "serving"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "gs-graystack-epp",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gs-graystack-gateway", "namespace": "llm"}
    ]
    assert not chart.of_kind("ClusterRole")
    assert chart.named("Role", "-gateway") == rendered("").named("Role", "-gateway")


def test_the_users_gateway_reaches_the_picker_port_and_only_it_more() -> None:
    chart = rendered(SCENARIO)
    policy = chart.named("NetworkPolicy", "-gateway")
    picker = [
        rule for rule in policy["spec"]["ingress"] if {"port": "epp", "protocol": "TCP"} in rule["ports"]
    ]
    assert picker == [{"ports": [{"port": "epp", "protocol": "TCP"}], "from": PROXIES}]
    default = rendered("").named("NetworkPolicy", "-gateway")["spec"]["ingress"]
    assert [rule for rule in policy["spec"]["ingress"] if rule not in picker] == default


def _masked(chart: Rendered) -> list[dict]:
    """The objects with the admin token, drawn at random on each render, left out."""
    return [{**obj, "data": "token"} if obj["kind"] == "Secret" else obj for obj in chart.objects]


def test_the_endpoint_picker_values_change_nothing_until_enabled() -> None:
    off = render(SCENARIO, sets=("endpointPicker.enabled=false",))
    assert _masked(off) == _masked(rendered(""))
    assert "endpoint_picker" not in _spec_data(rendered(""))
    assert not [obj for obj in rendered("").objects if obj["metadata"]["name"].endswith("-epp")]


def _set(path: str, value: object) -> tuple[str, str]:
    return ("--set-json", f"{path}={json.dumps(value)}")


REFUSED = {
    "endpointPicker.values.canary: no enabled variant canary": _set("endpointPicker.values.canary", "v2"),
    "endpointPicker.values: variants baseline and zero-layer share the label value stable": _set(
        "endpointPicker.values.zero-layer", "stable"
    ),
    "'/rollout/endpoint_picker'": _set("rollout.endpoint_picker", {"pool": "llm"}),  # from endpointPicker
    "'/endpointPicker/pool/name'": _set("endpointPicker.pool.name", ""),
    "'/endpointPicker/pool/namespace'": _set("endpointPicker.pool.namespace", "Serving"),
    "'/endpointPicker/variantLabel'": _set("endpointPicker.variantLabel", "track/"),
    "'/endpointPicker/values/baseline'": _set("endpointPicker.values.baseline", "not a label"),
    "'/endpointPicker/port'": _set("endpointPicker.port", 70000),
    "'/endpointPicker/healthPort'": _set("endpointPicker.healthPort", "9003"),
    "'/endpointPicker'": _set("endpointPicker.tls", False),
    "networkPolicy.gatewayFrom: the Endpoint Picker needs": _set("networkPolicy.gatewayFrom", []),
}


@pytest.mark.parametrize(("named", "setting"), REFUSED.items())
def test_bad_endpoint_picker_values_are_refused_naming_the_field(
    named: str, setting: tuple[str, str]
) -> None:
    result = run_helm("template", "gs", str(CHART), "-f", str(CHART / "ci" / SCENARIO), *setting, check=False)
    assert result.returncode != 0
    assert named in result.stderr


def test_a_model_variant_reaches_the_spec_and_takes_no_label_value() -> None:
    chart = render(
        sets=(
            "endpointPicker.enabled=true",
            "endpointPicker.pool.name=llm",
            "endpointPicker.models.zero-layer=llama-lora-v2",
            "networkPolicy.enabled=false",
        )
    )
    spec = validate_spec(_spec_data(chart))
    assert spec.endpoint_picker is not None
    assert spec.endpoint_picker.models == {"zero-layer": "llama-lora-v2"}
    assert spec.endpoint_picker.values == {}
