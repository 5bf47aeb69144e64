"""The chart's `rollout.capacity`: off, nothing new renders; on, the gateway gets its settings and a Role
narrowed to the variants' own Deployments (and HPAs), by name."""

from __future__ import annotations

import functools

import kubernetes_validate
import pytest
import yaml

from gateway.rollout.capacity import parse_settings
from graystack.cli import main
from tests.chart.test_chart import KUBERNETES_VERSION, rendered, spec_of
from tests.support.helm import CHART, Rendered, render, run_helm

ON = ("rollout.capacity.enabled=true",)
WITH_HPA = (*ON, "rollout.capacity.variants.zero-layer.hpa=gs-graystack-zero-layer")


@functools.cache
def chart(sets: tuple[str, ...]) -> Rendered:
    return render(sets=sets)


def gateway_env(chart: Rendered) -> dict[str, str | None]:
    container = chart.named("Deployment", "-gateway")["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value") for item in container["env"]}


def capacity_rules(chart: Rendered) -> list[dict]:
    groups = {"apps", "autoscaling"}
    return [r for r in chart.named("Role", "-gateway")["rules"] if groups & set(r["apiGroups"])]


def test_off_by_default_nothing_scales_and_nothing_more_is_granted():
    default = rendered("")
    assert "GRAYSTACK_CAPACITY" not in gateway_env(default)
    assert capacity_rules(default) == []
    spec = yaml.safe_load(default.named("ConfigMap", "-spec")["data"]["spec.yaml"])
    assert "capacity" not in spec  # the gateway's setting, never part of the rollout spec


def test_on_the_gateway_gets_the_settings_with_the_charts_deployment_names():
    on = chart(ON)
    kube_gateway = main.commands["kube-gateway"].params
    assert "GRAYSTACK_CAPACITY" in {param.envvar for param in kube_gateway}
    settings = parse_settings(gateway_env(on)["GRAYSTACK_CAPACITY"])
    deployments = {d["metadata"]["name"] for d in on.of_kind("Deployment")}
    assert {v.deployment for v in settings.variants.values()} <= deployments
    assert settings.variants["zero-layer"].deployment == "gs-graystack-zero-layer"
    assert (settings.fleet_replicas, settings.ready_timeout, settings.warmup) == (8, 600.0, 300.0)
    assert settings.scale_down_delay == 1800.0
    assert settings.gpu_hour_price == 0  # no price: no cost shown
    # The default rules' segments at the locustfile's default mix, `helm test`'s at none: every rule
    # has its share, so status notes none missing.
    assert {rule.value for rule in spec_of(on).routing.rules} == set(settings.segments)
    assert {value: share for value, share in settings.segments.items() if share} == {
        "high_load": 20,
        "mobile": 20,
    }
    assert spec_of(on) == spec_of(rendered(""))  # the spec ConfigMap is the same with it on


def test_a_gpu_hour_price_reaches_the_gateway_with_each_variants_gpus_per_pod():
    priced = chart((*ON, "rollout.capacity.gpuHourPrice=3", "variants.zero-layer.gpu.count=4"))
    settings = parse_settings(gateway_env(priced)["GRAYSTACK_CAPACITY"])
    assert settings.gpu_hour_price == 3
    assert {name: v.gpus_per_pod for name, v in settings.variants.items()} == {"baseline": 1, "zero-layer": 4}


def test_on_the_role_reads_and_scales_only_the_variants_deployments_by_name():
    rules = capacity_rules(chart(ON))
    variants = ["gs-graystack-baseline", "gs-graystack-zero-layer"]
    assert rules == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": variants, "verbs": ["get"]},
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": variants,
            "verbs": ["patch"],  # the Deployment's own read gives its replicas: no get on scale
        },
    ]
    kubernetes_validate.validate(chart(ON).named("Role", "-gateway"), KUBERNETES_VERSION, strict=True)


def test_a_named_hpa_gets_its_min_replicas_patched_instead_of_the_deployments_scale():
    rules = capacity_rules(chart(WITH_HPA))
    scaled = {name for r in rules if r["resources"] == ["deployments/scale"] for name in r["resourceNames"]}
    assert scaled == {"gs-graystack-baseline"}
    [hpas] = [r for r in rules if r["resources"] == ["horizontalpodautoscalers"]]
    assert hpas == {
        "apiGroups": ["autoscaling"],
        "resources": ["horizontalpodautoscalers"],
        "resourceNames": ["gs-graystack-zero-layer"],
        "verbs": ["get", "patch"],
    }
    settings = parse_settings(gateway_env(chart(WITH_HPA))["GRAYSTACK_CAPACITY"])
    assert settings.variants["zero-layer"].hpa == "gs-graystack-zero-layer"


def test_the_charts_own_hpa_is_the_one_capacity_moves_and_no_deployment_keeps_replicas():
    """With capacity on, the gateway sizes the variants: a `replicas` left in the Deployments would be put
    back by every `helm upgrade`. With the chart's HPA on a variant, that HPA is the one sized."""
    variants = [
        d for d in chart(ON).of_kind("Deployment") if "graystack.dev/variant" in d["metadata"]["labels"]
    ]
    assert len(variants) == 2
    assert [d["spec"].get("replicas") for d in variants] == [None, None]
    both = chart((*ON, "variants.zero-layer.autoscaling.enabled=true"))
    settings = parse_settings(gateway_env(both)["GRAYSTACK_CAPACITY"])
    assert settings.variants["zero-layer"].hpa == "gs-graystack-zero-layer"
    assert settings.variants["baseline"].hpa in ("", None)
    [hpas] = [r for r in capacity_rules(both) if r["resources"] == ["horizontalpodautoscalers"]]
    assert hpas["resourceNames"] == ["gs-graystack-zero-layer"]
    assert {h["metadata"]["name"] for h in both.of_kind("HorizontalPodAutoscaler")} == {
        "gs-graystack-zero-layer"
    }
    off = rendered("")
    assert all("replicas" in d["spec"] for d in off.of_kind("Deployment"))


@pytest.mark.parametrize(
    ("assignment", "named"),
    [
        ("rollout.capacity.fleetReplicas=0", "fleetReplicas"),
        ("rollout.capacity.readyTimeout=soon", "readyTimeout"),
        ("rollout.capacity.variants.canary.minReplicas=1", "no enabled variant canary"),
        ("rollout.capacity.variants.baseline.replicas=3", "replicas"),
        ("rollout.capacity.gpuHourPrice=-1", "gpuHourPrice"),
        ("rollout.capacity.segments.mobile=101", "segments"),
        ("rollout.capacity.segments.mobile=90", "add up to 110%"),
    ],
)
def test_bad_capacity_values_fail_the_render(assignment: str, named: str) -> None:
    result = run_helm("template", "gs", str(CHART), "--set", ON[0], "--set", assignment, check=False)
    assert result.returncode != 0
    assert named in result.stderr
