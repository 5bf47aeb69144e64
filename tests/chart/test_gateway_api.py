"""The chart's Gateway API mode (issue 36): the user's own gateway carries the split, so no graystack Envoy
renders; the gateway gets a Role in each namespace the routes, their Gateways and the backends live in,
and the leader's access-log receiver a Service of its own. The generic checks (lint, Kubernetes schemas,
non-root, resources) run on ci/gateway-api-values.yaml through test_chart.SCENARIOS."""

from __future__ import annotations

import json

import pytest

from gateway.kubernetes.role_label import LEADER, ROLE_LABEL
from gateway.spec.gateway_api import BackendRef, GatewayApi, RouteRef
from tests.chart.test_chart import rendered, spec_of
from tests.support.helm import CHART, Rendered, render, run_helm

SCENARIO = "gateway-api-values.yaml"
READ = ("get", "list", "watch")
GATEWAY_API = "gateway.networking.k8s.io"


def _components(chart: Rendered) -> set[str]:
    return {obj["metadata"]["labels"]["app.kubernetes.io/component"] for obj in chart.objects}


def test_no_envoy_nor_what_only_it_needs_while_the_gateway_runs() -> None:
    chart = rendered(SCENARIO)
    assert "envoy" not in _components(chart)
    assert not [obj for obj in chart.objects if "envoy" in obj["metadata"]["name"]]
    assert not chart.of_kind("PodMonitor")
    assert not chart.of_kind("Pod")  # `helm test` sends its requests through Envoy
    assert {pdb["metadata"]["name"] for pdb in chart.of_kind("PodDisruptionBudget")} == {
        "gs-graystack-gateway",
        "gs-graystack-baseline",
        "gs-graystack-zero-layer",
    }
    (rules,) = chart.of_kind("PrometheusRule")
    assert [group["name"] for group in rules["spec"]["groups"]] == ["graystack-rollout"]  # no xDS alerts
    gateway = chart.named("Deployment", "-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert gateway["args"] == ["kube-gateway"]
    assert {"name": "xds", "containerPort": 18000, "protocol": "TCP"} in gateway["ports"]


def test_the_default_mode_has_envoy_and_nothing_of_the_gateway_api_mode() -> None:
    chart = rendered("")
    assert {"envoy", "test"} <= _components(chart)
    assert "als" not in _components(chart)
    assert not [role for role in chart.of_kind("Role") if role["metadata"]["name"].endswith("-gateway-api")]
    assert spec_of(chart).gateway_api is None


def _masked(chart: Rendered) -> list[dict]:
    """The objects with the admin token, drawn at random on each render, left out."""
    return [{**obj, "data": "token"} if obj["kind"] == "Secret" else obj for obj in chart.objects]


def test_the_gateway_api_values_change_nothing_until_enabled() -> None:
    off = render(SCENARIO, sets=("gatewayApi.enabled=false",))
    assert _masked(off) == _masked(rendered(""))


def _role_rules(chart: Rendered) -> dict[str, list[tuple]]:
    roles = [role for role in chart.of_kind("Role") if role["metadata"]["name"] == "gs-graystack-gateway-api"]
    return {
        role["metadata"]["namespace"]: [
            (
                tuple(r["apiGroups"]),
                tuple(r["resources"]),
                tuple(r["verbs"]),
                tuple(r.get("resourceNames", ())),
            )
            for r in role["rules"]
        ]
        for role in roles
    }


ROUTES = [
    ((GATEWAY_API,), ("httproutes",), READ, ()),
    ((GATEWAY_API,), ("httproutes",), ("update", "patch"), ("llm",)),
]
GATEWAYS = [((GATEWAY_API,), ("gateways",), READ, ())]
BACKENDS = [
    (("inference.networking.k8s.io",), ("inferencepools",), READ, ()),
    (("discovery.k8s.io",), ("endpointslices",), READ, ()),
    (("",), ("pods",), READ, ()),
]


def test_a_role_in_each_namespace_grants_exactly_what_the_rollout_touches_there() -> None:
    """Routes in llm (the release's) and edge, the baseline's Service beside each route, the candidate's
    InferencePool in pools, the Gateways in gateway-system: no ClusterRole, writes to the named routes only."""
    chart = rendered(SCENARIO)
    assert _role_rules(chart) == {
        "llm": ROUTES + GATEWAYS + BACKENDS,
        "edge": ROUTES + GATEWAYS + BACKENDS,
        "pools": BACKENDS,
        "gateway-system": GATEWAYS,
    }
    assert not chart.of_kind("ClusterRole")
    assert not chart.of_kind("ClusterRoleBinding")
    bindings = [
        b for b in chart.of_kind("RoleBinding") if b["metadata"]["name"] == "gs-graystack-gateway-api"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["edge", "gateway-system", "llm", "pools"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "gs-graystack-gateway-api",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gs-graystack-gateway", "namespace": "llm"}
        ]
    # What the gateway needs anyway (its spec, state, Lease, Events, the leader label) stays as it was.
    assert chart.named("Role", "-gateway") == rendered("").named("Role", "-gateway")


def test_the_access_log_reaches_the_leader_through_its_own_service_only() -> None:
    chart = rendered(SCENARIO)
    als = chart.named("Service", "-als")
    assert als["metadata"]["name"] == "gs-graystack-als"
    assert als["spec"]["type"] == "ClusterIP"
    assert als["spec"]["ports"] == [
        {"name": "als", "port": 18000, "targetPort": "xds", "protocol": "TCP", "appProtocol": "grpc"}
    ]
    pods = chart.named("Deployment", "-gateway")["spec"]["template"]["metadata"]["labels"]
    gateway = chart.named("Service", "-gateway")["spec"]["selector"]
    assert gateway.items() <= pods.items()
    assert als["spec"]["selector"] == {**gateway, ROLE_LABEL: LEADER}  # a follower refuses the log
    to_grpc = [
        s["metadata"]["name"]
        for s in chart.of_kind("Service")
        for p in s["spec"]["ports"]
        if p["targetPort"] == "xds"
    ]
    assert to_grpc == ["gs-graystack-als"]  # no xDS client here: the other Services lose that port
    notes = run_helm(
        "install", "gs", str(CHART), "-n", "llm", "--dry-run=client", "-f", str(CHART / "ci" / SCENARIO)
    )
    assert "gs-graystack-als.llm.svc:18000" in notes.stdout.split("NOTES:", 1)[1]


def _admitted(policy: dict, port: str) -> list[dict]:
    return [
        peer
        for rule in policy["spec"]["ingress"]
        if {"port": port, "protocol": "TCP"} in rule["ports"]
        for peer in rule["from"]
    ]


def test_network_policies_admit_the_users_gateway_where_envoy_was() -> None:
    chart = rendered(SCENARIO)
    proxies = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}}]
    assert _admitted(chart.named("NetworkPolicy", "-gateway"), "xds") == proxies
    for variant in ("-baseline", "-zero-layer"):
        policy = chart.named("NetworkPolicy", variant)
        assert policy["spec"]["ingress"][0] == {
            "ports": [{"port": "http", "protocol": "TCP"}],
            "from": proxies,
        }


def test_the_rendered_spec_names_the_routes_and_backends_for_graystacks_own_model() -> None:
    spec = spec_of(rendered(SCENARIO))
    assert spec.gateway_api == GatewayApi(
        routes=[RouteRef(name="llm", namespace="llm"), RouteRef(name="llm", namespace="edge")],
        backends={
            "baseline": BackendRef(name="llm-baseline", port=8000),
            "zero-layer": BackendRef(kind="InferencePool", name="llm-zero-layer", namespace="pools"),
        },
        on_drift="hold",
    )
    assert not [rule for rule in spec.routing.rules if rule.value.startswith("graystack-test-")]


def _set(path: str, value: object) -> tuple[str, str]:
    return ("--set-json", f"{path}={json.dumps(value)}")


REFUSED = {
    "no backendRef for variant zero-layer": _set(
        "gatewayApi.backends", {"baseline": {"name": "b", "port": 80}}
    ),
    "gatewayApi.backends.canary: no enabled variant canary": _set(
        "gatewayApi.backends.canary", {"name": "c", "port": 80}
    ),
    "'/gatewayApi/backends/zero-layer': missing property 'name'": _set("gatewayApi.backends.zero-layer", {}),
    "'/gatewayApi/backends/baseline': missing property 'port'": _set(
        "gatewayApi.backends.baseline", {"name": "b"}
    ),
    "'/gatewayApi/backends/zero-layer/port'": _set("gatewayApi.backends.zero-layer.port", 8000),
    "'/gatewayApi/routes': minItems": _set("gatewayApi.routes", []),
    "'/gatewayApi/onDrift'": _set("gatewayApi.onDrift", "ignore"),
    "'/rollout/gateway_api'": _set("rollout.gateway_api", {"on_drift": "hold"}),  # filled in from gatewayApi
    "networkPolicy.gatewayFrom: Gateway API mode needs": _set("networkPolicy.gatewayFrom", []),
    "loadtest: the soak sends its load through graystack's Envoy": _set("loadtest.enabled", True),
}


@pytest.mark.parametrize(("named", "setting"), REFUSED.items())
def test_bad_gateway_api_values_are_refused_naming_the_field(named: str, setting: tuple[str, str]) -> None:
    result = run_helm("template", "gs", str(CHART), "-f", str(CHART / "ci" / SCENARIO), *setting, check=False)
    assert result.returncode != 0
    assert named in result.stderr
