"""The house's floors, as pyproject.toml's [tool.importlinter] contracts state them: they hold on main, and
they are no formality: an import that climbs a floor, or closes a circle, breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "gateway", "graystack", "inference", "probes", "loadtests")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def house(tmp_path: Path) -> Path:
    """A copy of the product packages and the contracts, to break."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def add_import(module: Path, line: str) -> None:
    module.write_text(module.read_text() + f"\n{line}\n")


def test_the_contracts_hold_on_main(house: Path):
    result = lint_imports(house)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the builders are pure and below the rollout: they may not read the rollout's plan
        (
            "gateway/envoy/routes.py",
            "from gateway.rollout import plan",
            "gateway.envoy is not allowed to import gateway.rollout",
        ),
        # the spec is everyone's input: it knows nothing of who reads it
        (
            "gateway/spec/model.py",
            "import gateway.service",
            "gateway.spec is not allowed to import gateway.service",
        ),
        # ... and a leaf: validated where it is written too (the CLI), it imports no reader and no judge
        (
            "gateway/spec/strategy.py",
            "from gateway.metrics import observations",
            "gateway.spec is not allowed to import gateway.metrics",
        ),
        (
            "gateway/spec/quality.py",
            "from gateway.quality import judge",
            "gateway.spec is not allowed to import gateway.quality",
        ),
        # the readers count; what compares answers is given to them (metrics/answered.py's QualitySource)
        (
            "gateway/metrics/answered.py",
            "from gateway.quality import judging",
            "gateway.metrics is not allowed to import gateway.quality",
        ),
        # xDS knows nothing of rollouts
        (
            "gateway/xds/cache.py",
            "from gateway.spec import model",
            "gateway.xds is not allowed to import gateway.spec",
        ),
        # the model server never imports the gateway
        ("inference/server/app.py", "import gateway.names", "inference is not allowed to import gateway"),
        # a check is read, tested and removed on its own: no check imports another
        (
            "gateway/rollout/checks/judge.py",
            "from gateway.rollout.checks import agreement",
            "- gateway.rollout.checks.judge -> gateway.rollout.checks.agreement",
        ),
    ],
)
def test_an_import_that_climbs_a_floor_breaks_the_layers(house: Path, module: str, line: str, broken: str):
    add_import(house / module, line)
    result = lint_imports(house)
    assert result.returncode == 1
    assert broken in result.stdout


def test_a_circle_inside_a_room_breaks_the_contract(house: Path):
    add_import(house / "gateway/rollout/plan.py", "from gateway.rollout import controller")
    result = lint_imports(house)
    assert result.returncode == 1
    assert "No cycles are allowed in gateway.rollout" in result.stdout
