"""Rendering the chart with the real Helm (from `make helm`) for the chart tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.processes import require_binary

CHART = Path(__file__).resolve().parents[2] / "charts" / "graystack"
MONITORING_API = "monitoring.coreos.com/v1"


@dataclass(frozen=True)
class Rendered:
    objects: list[dict]

    def of_kind(self, kind: str) -> list[dict]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def named(self, kind: str, suffix: str) -> dict:
        """The one object of `kind` whose name ends with `suffix`."""
        (found,) = [obj for obj in self.of_kind(kind) if obj["metadata"]["name"].endswith(suffix)]
        return found


def helm() -> str:
    return require_binary("helm", "renders and lints the chart", "make helm")


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120, check=check)


def render(
    *values_files: str, chart: Path = CHART, sets: tuple[str, ...] = (), operator: bool = True
) -> Rendered:
    """`helm template` of `chart` (with the Prometheus Operator's CRDs present when `operator`)."""
    args = ["template", "gs", str(chart), "--namespace", "llm"]
    for name in values_files:
        args += ["-f", str(chart / "ci" / name)]
    for item in sets:
        args += ["--set", item]
    if operator:
        args += ["--api-versions", MONITORING_API]
    return Rendered([obj for obj in yaml.safe_load_all(run_helm(*args).stdout) if obj])


def pod_specs(rendered: Rendered) -> list[tuple[str, dict]]:
    """(object name, pod spec) of every workload (Deployments and Jobs) and of the test pod."""
    workloads = rendered.of_kind("Deployment") + rendered.of_kind("Job")
    specs = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in workloads]
    return specs + [(p["metadata"]["name"], p["spec"]) for p in rendered.of_kind("Pod")]
