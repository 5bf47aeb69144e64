"""The alert rules under promtool, Prometheus' own checker: the file loads, and tests/promtool/alerts_test.yml
(every alert firing on the input that should page, quiet on the healthy one) passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from graystack.observability.files import ALERTS_FILE
from tests.support.processes import require_binary

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests/promtool/alerts_test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = require_binary(
        "promtool", "checks and unit-tests the alert rules", provided_by="make prometheus"
    )
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_promtool_accepts_the_rules_file():
    checked = promtool("check", "rules", str(ALERTS_FILE))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_promtool_unit_tests_pass():
    tested = promtool("test", "rules", str(CASES.relative_to(ROOT)))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_quiet():
    alerts = {
        r["alert"] for g in yaml.safe_load((ROOT / ALERTS_FILE).read_text())["groups"] for r in g["rules"]
    }
    cases = [c for t in yaml.safe_load(CASES.read_text())["tests"] for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert fired == alerts, f"not shown firing: {alerts - fired}"
    assert quiet == alerts, f"not shown quiet: {alerts - quiet}"
