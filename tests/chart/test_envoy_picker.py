"""The chart's picker for graystack's own Envoy (`envoyPicker`): the spec's envoy_picker with `serve: true`,
every gateway replica binding it on all addresses, Envoy dialing the epp Service (the leader's alone), the
container port and network rule endpointPicker uses; the combinations that cannot work refused naming
the values."""

from __future__ import annotations

import pytest
import yaml

from gateway.spec.envoy_picker import EnvoyPicker
from gateway.spec.model import validate_spec
from graystack.cli import main
from tests.chart.test_chart import rendered
from tests.chart.test_endpoint_picker import _gateway, _masked, _set, _spec_data
from tests.support.helm import CHART, Rendered, render, run_helm

ON = ("envoyPicker.enabled=true", "rollout.retries.fallback=null")


def _envoy_peer(chart: Rendered) -> dict:
    labels = chart.named("Deployment", "-envoy")["spec"]["template"]["metadata"]["labels"]
    return {
        "podSelector": {
            "matchLabels": {
                k: labels[k]
                for k in (
                    "app.kubernetes.io/name",
                    "app.kubernetes.io/instance",
                    "app.kubernetes.io/component",
                )
            }
        }
    }


def test_the_rendered_spec_has_the_gateway_serve_envoys_picker_and_parses_with_graystacks_model() -> None:
    chart = render(sets=(*ON, "envoyPicker.scorers.queue=2", "envoyPicker.timeout=500ms"))
    spec = validate_spec(_spec_data(chart))
    assert spec.envoy_picker == EnvoyPicker(
        host="gs-graystack-epp.llm.svc", port=9002, tls=True, timeout=0.5, serve=True, scorers={"queue": 2}
    )
    assert spec.retries.fallback is None
    assert spec.endpoint_picker is None


def test_every_replica_binds_the_picker_and_the_epp_service_reaches_the_leader_alone() -> None:
    """Every replica binds it (any may come to lead); the Service reaches the leader, where Envoy's log of
    the picks' ends goes too (the answer log's Service)."""
    chart = render(sets=(*ON, "envoyPicker.port=9012"))
    gateway = _gateway(chart)
    assert gateway["args"] == ["kube-gateway", "--picker-host", "0.0.0.0"]
    options = {opt for param in main.commands["kube-gateway"].params for opt in param.opts}
    assert {arg for arg in gateway["args"] if arg.startswith("--")} <= options
    assert {"name": "epp", "containerPort": 9012, "protocol": "TCP"} in gateway["ports"]
    assert not [p for p in gateway["ports"] if p["name"] == "epp-health"]  # Envoy asks no health
    epp = chart.named("Service", "-epp")
    assert epp["spec"]["ports"] == [
        {
            "name": "http-checks",
            "port": 9012,
            "targetPort": "epp",
            "protocol": "TCP",
            "appProtocol": "http",
        }
    ]
    assert epp["spec"]["selector"] == chart.named("Service", "-gateway-admin")["spec"]["selector"]
    assert epp["spec"]["selector"]["graystack.dev/role"] == "leader"
    assert validate_spec(_spec_data(chart)).envoy_picker.port == 9012
    assert not [r for r in chart.of_kind("Role") if r["metadata"]["name"].endswith("-epp")]  # no pool to read


def test_only_graystacks_envoy_reaches_the_picker_port() -> None:
    chart = render(sets=ON)
    ingress = chart.named("NetworkPolicy", "-gateway")["spec"]["ingress"]
    picker = [rule for rule in ingress if {"port": "epp", "protocol": "TCP"} in rule["ports"]]
    assert picker == [{"ports": [{"port": "epp", "protocol": "TCP"}], "from": [_envoy_peer(chart)]}]
    default = rendered("").named("NetworkPolicy", "-gateway")["spec"]["ingress"]
    assert [rule for rule in ingress if rule not in picker] == default


def test_the_envoy_picker_values_change_nothing_until_enabled() -> None:
    off = render(sets=("envoyPicker.scorers.queue=2", "envoyPicker.port=9012"))
    assert _masked(off) == _masked(rendered(""))
    assert "envoy_picker" not in yaml.safe_dump(_spec_data(rendered("")))


REFUSED = {
    "envoyPicker.enabled, rollout.retries.fallback": ("--set", "envoyPicker.enabled=true"),
    "envoyPicker.enabled, endpointPicker.enabled": (
        "--set",
        "envoyPicker.enabled=true,rollout.retries.fallback=null,endpointPicker.enabled=true,"
        "endpointPicker.pool.name=llm,networkPolicy.enabled=false",
    ),
    "'/envoyPicker/port'": _set("envoyPicker.port", 70000),
    "'/envoyPicker/timeout'": _set("envoyPicker.timeout", "soon"),
    "'/envoyPicker/scorers/queue'": _set("envoyPicker.scorers", {"queue": -1}),
}


@pytest.mark.parametrize(("named", "setting"), REFUSED.items())
def test_envoy_picker_values_that_cannot_work_are_refused_naming_them(
    named: str, setting: tuple[str, str]
) -> None:
    result = run_helm("template", "gs", str(CHART), *setting, check=False)
    assert result.returncode != 0
    assert named in result.stderr


def test_in_gateway_api_mode_it_is_refused() -> None:
    result = run_helm(
        "template",
        "gs",
        str(CHART),
        "-f",
        str(CHART / "ci" / "gateway-api-values.yaml"),
        "--set",
        ",".join(ON),
        check=False,
    )
    assert result.returncode != 0
    assert "envoyPicker.enabled, gatewayApi.enabled" in result.stderr
