"""The Dockerfiles against the chart that runs their images. No Docker engine runs here, so the images
are not built in tests: these checks keep the two from drifting apart (names, tags, user)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "graystack"
DOCKERFILES = {
    "slim": ROOT / "docker" / "slim.Dockerfile",
    "inference": ROOT / "docker" / "inference.Dockerfile",
}


def _values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def _stages(dockerfile: Path) -> dict[str, str]:
    """Stage name ("last" for an unnamed stage) -> the stage's text."""
    stages = {}
    for part in re.split(r"^FROM ", dockerfile.read_text(), flags=re.MULTILINE)[1:]:
        named = re.search(r" AS (\w+)", part.splitlines()[0])
        stages[named.group(1) if named else "last"] = part
    return stages


def _instructions(dockerfile: Path) -> str:
    return "\n".join(line for line in dockerfile.read_text().splitlines() if not line.startswith("#"))


def test_make_images_builds_every_graystack_image_the_chart_references() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version  # an empty tag in values means the appVersion
    commands = subprocess.run(
        ["make", "-s", "-n", "images"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    ).stdout
    built = set(re.findall(r"-t (\S+)", commands))
    wanted = {
        f"{image['repository']}:{image['tag'] or version}"
        for name, image in _values()["images"].items()
        if name != "envoy"
    }
    assert wanted == built


@pytest.mark.parametrize(
    ("stage", "dockerfile"),
    [("gateway", "slim"), ("probe", "slim"), ("loadtest", "slim"), ("last", "inference")],
)
def test_each_image_runs_as_the_non_root_user_the_chart_expects(stage: str, dockerfile: str) -> None:
    text = _stages(DOCKERFILES[dockerfile])[stage]
    users = re.findall(r"^USER (\d+):(\d+)$", text, flags=re.MULTILINE)
    context = _values()["containerSecurityContext"]
    assert users == [(str(context["runAsUser"]), str(context["runAsGroup"]))]


def test_inference_builds_on_cuda_and_the_slim_images_carry_no_model_runtime() -> None:
    inference = DOCKERFILES["inference"].read_text()
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:\S+-runtime-", inference, flags=re.MULTILINE)
    assert '"torch==2.13.0"' in inference
    slim = _instructions(DOCKERFILES["slim"])
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.1\d-slim", slim, flags=re.MULTILINE)
    assert "torch" not in slim
    assert "[inference]" not in slim
