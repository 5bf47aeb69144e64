"""The chart's HorizontalPodAutoscalers on queue depth (variants.<name>.autoscaling): rendered only where the
values ask, each scaling its own variant's Deployment, which then leaves `replicas` to it, on a metric the
Prometheus adapter rules in charts/graystack/examples serve. The adapter is not run here: its naming
(pkg/naming/metric_namer.go: series query, `name.matches`, `name.as` expanded as Go's regexp does) is
applied to the model server's own gauge names."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from inference.server.telemetry import ServerMetrics
from tests.chart.test_chart import SCENARIOS, rendered
from tests.support.helm import CHART, Rendered, run_helm

AUTOSCALING = "autoscaling-values.yaml"
ADAPTER_RULES = CHART / "examples" / "prometheus-adapter-rules.yaml"
SERIES_QUERY = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<matchers>.*)\}$")
GO_REFERENCE = re.compile(r"\$(?:\{(\w+)\}|(\w+)|\$)")


def _values(path) -> dict:
    return yaml.safe_load(path.read_text())


def _metric_schema() -> dict:
    schema = json.loads((CHART / "values.schema.json").read_text())
    return schema["$defs"]["variant"]["properties"]["autoscaling"]["properties"]["metric"]


def _variant_deployments(chart: Rendered) -> dict[str, dict]:
    return {
        d["metadata"]["labels"]["graystack.dev/variant"]: d
        for d in chart.of_kind("Deployment")
        if "graystack.dev/variant" in d["metadata"]["labels"]
    }


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != AUTOSCALING])
def test_no_autoscaler_renders_unless_the_values_ask(scenario: str) -> None:
    chart = rendered(scenario)
    assert not chart.of_kind("HorizontalPodAutoscaler")
    deployments = _variant_deployments(chart)
    assert deployments
    assert all("replicas" in d["spec"] for d in deployments.values())


def test_autoscaling_adds_the_autoscalers_and_takes_only_replicas_from_the_deployments() -> None:
    def comparable(chart: Rendered) -> list[dict]:
        """Every object but the HPAs, variant Deployments without `replicas`, and the random admin token."""
        objects = []
        for obj in chart.objects:
            if obj["kind"] == "HorizontalPodAutoscaler":
                continue
            if obj["kind"] == "Secret":
                obj = {**obj, "data": sorted(obj["data"])}
            if obj["kind"] == "Deployment" and "graystack.dev/variant" in obj["metadata"]["labels"]:
                obj = {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "replicas"}}
            objects.append(obj)
        return objects

    assert comparable(rendered(AUTOSCALING)) == comparable(rendered(""))


def test_each_autoscaler_scales_its_own_deployment_as_its_values_say() -> None:
    chart = rendered(AUTOSCALING)
    asked = _values(CHART / "ci" / AUTOSCALING)["variants"]
    defaults = _values(CHART / "values.yaml")["variants"]
    deployments = _variant_deployments(chart)
    autoscalers = chart.of_kind("HorizontalPodAutoscaler")
    assert len(autoscalers) == len(asked) == 2
    for name, values in asked.items():
        want = {**defaults[name]["autoscaling"], **values["autoscaling"]}
        hpa = chart.named("HorizontalPodAutoscaler", f"-{name}")
        deployment = deployments[name]
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
        }
        assert "replicas" not in deployment["spec"]  # else every `helm upgrade` resets what the HPA chose
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (
            want["minReplicas"],
            want["maxReplicas"],
        )
        (metric,) = hpa["spec"]["metrics"]
        assert metric["type"] == "Pods"
        assert metric["pods"]["metric"] == {"name": want["metric"]}
        assert metric["pods"]["target"] == {
            "type": "AverageValue",
            "averageValue": str(want["targetAverageValue"]),
        }
        behavior = hpa["spec"]["behavior"]
        assert behavior["scaleDown"] == defaults[name]["autoscaling"]["behavior"]["scaleDown"]
        assert behavior["scaleUp"] == want["behavior"]["scaleUp"]


def test_slow_starting_gpu_pods_are_added_one_at_a_time_and_kept_for_minutes() -> None:
    hpa = rendered(AUTOSCALING).named("HorizontalPodAutoscaler", "-baseline")  # the chart's behavior
    up, down = hpa["spec"]["behavior"]["scaleUp"], hpa["spec"]["behavior"]["scaleDown"]
    assert up["stabilizationWindowSeconds"] > 0  # a burst of queued requests alone does not add a GPU
    assert all(p["type"] == "Pods" and p["value"] == 1 for p in up["policies"] + down["policies"])
    assert down["stabilizationWindowSeconds"] >= 300


def _go_expand(template: str, match: re.Match) -> str:
    """Go's Regexp.ExpandString: `$1`, `${1}`, `$name`, `${name}`, `$$`; an unmatched group is empty."""

    def reference(ref: re.Match) -> str:
        if ref.group(0) == "$$":
            return "$"
        key = ref.group(1) or ref.group(2)
        return match.group(int(key) if key.isdigit() else key) or ""

    return GO_REFERENCE.sub(reference, template)


def _served_name(rule: dict, series: str) -> str | None:
    """The name the adapter serves `series` under by this rule, None where the rule does not select it."""
    query = SERIES_QUERY.match(rule["seriesQuery"])
    assert query, rule["seriesQuery"]
    matches = rule["name"]["matches"]
    match = re.search(matches, series)
    if query["name"] != series or not match:
        return None
    groups = re.compile(matches).groups
    default = "$0" if groups == 0 else "$1" if groups == 1 else None
    return _go_expand(rule["name"].get("as") or default, match)


def test_the_adapter_rules_serve_every_metric_an_autoscaler_can_ask_for() -> None:
    rules = _values(ADAPTER_RULES)["rules"]["custom"]
    server = ServerMetrics("baseline", "graystack")
    gauges = [server.waiting.describe()[0].name, server.vllm_waiting.describe()[0].name]
    assert "vllm:num_requests_waiting" in gauges  # vLLM's own name, which graystack's server exports too
    served = {}
    for gauge in gauges:
        (name,) = [n for n in (_served_name(rule, gauge) for rule in rules) if n]
        served[gauge] = name
    assert len(set(served.values())) == len(gauges)  # one series per served name in the adapter
    for rule in rules:
        matchers = SERIES_QUERY.match(rule["seriesQuery"])["matchers"]
        assert {'namespace!=""', 'pod!=""'} <= set(matchers.split(","))
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }
        assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]
        assert rule["metricsQuery"].endswith("by (<<.GroupBy>>)")  # one value per pod

    schema = _metric_schema()
    assert all(re.fullmatch(schema["pattern"], name) for name in served.values())
    assert set(schema["examples"]) == set(served.values())
    values_files = [CHART / "values.yaml", *sorted((CHART / "ci").glob("*.yaml"))]
    offered = {
        variant["autoscaling"]["metric"]
        for path in values_files
        for variant in (_values(path).get("variants") or {}).values()
        if "metric" in variant.get("autoscaling", {})
    }
    assert {"graystack_requests_waiting", "vllm_num_requests_waiting"} <= offered  # the ci/ files use both
    offered |= {
        m["pods"]["metric"]["name"]
        for hpa in rendered(AUTOSCALING).of_kind("HorizontalPodAutoscaler")
        for m in hpa["spec"]["metrics"]
    }
    assert offered <= set(served.values())


def test_the_docs_show_the_rules_of_the_example() -> None:
    docs = (CHART.parents[1] / "docs" / "kubernetes.md").read_text()
    section = docs.split("## Autoscaling on queue depth", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == _values(ADAPTER_RULES)


BAD_VALUES = {
    "variants.zero-layer.autoscaling.minReplicas=0": "minReplicas",
    "variants.zero-layer.autoscaling.metric=vllm:num_requests_waiting": "metric",
    "variants.zero-layer.autoscaling.targetAverageValue=0": "targetAverageValue",
    "variants.zero-layer.autoscaling.behavior.scaleUp.selectPolicy=Fastest": "selectPolicy",
    "variants.zero-layer.autoscaling.maxReplica=3": "additional properties 'maxReplica' not allowed",
    "variants.zero-layer.autoscaling.enabled=true,variants.zero-layer.autoscaling.minReplicas=5,"
    "variants.zero-layer.autoscaling.maxReplicas=2": "variants.zero-layer.autoscaling: minReplicas (5) is "
    "more than maxReplicas (2)",
}


@pytest.mark.parametrize(("assignment", "named"), BAD_VALUES.items())
def test_bad_autoscaling_values_are_refused_by_name(assignment: str, named: str) -> None:
    result = run_helm("template", "gs", str(CHART), "--set", assignment, check=False)
    assert result.returncode != 0
    assert named in result.stderr
