"""The shadow comparison on the Rollout decisions dashboard: the optional `shadow_agreement` check drawn
like every other check, and the candidate's agreement with the baseline beside it, evaluated by
promtool on made-up counters (Grafana's variables at "All")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from graystack.observability import dashboards
from tests.support.processes import require_binary

# zero-layer, per minute: 3 answers equal to the baseline's, 1 different, 4 not found at the baseline
COMPARISONS = {"agree": "0+3x10", "differ": "0+1x10", "missing": "0+4x10"}


def panels() -> dict[str, dict]:
    board = json.loads(dashboards.render("rollout-decisions"))
    return {panel["title"]: panel for panel in board["panels"]}


def at_all(expr: str) -> str:
    """The query as Grafana sends it with every variable at "All" and a 2-minute rate interval."""
    return expr.replace("$namespace", ".*").replace("$variant", ".*").replace("$__rate_interval", "2m")


def evaluate(tmp_path: Path, expr: str, expected: list[dict]) -> subprocess.CompletedProcess:
    """`promtool test rules` of one query at 8 minutes over COMPARISONS."""
    series = [
        {
            "series": f'graystack_shadow_comparisons_total{{variant="zero-layer", result="{result}"}}',
            "values": v,
        }
        for result, v in COMPARISONS.items()
    ]
    case = {"interval": "1m", "input_series": series}
    case["promql_expr_test"] = [{"expr": at_all(expr), "eval_time": "8m", "exp_samples": expected}]
    tests = tmp_path / "panel_test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [], "tests": [case]}))
    promtool = require_binary("promtool", "evaluates the panel's query", provided_by="make prometheus")
    return subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)


def test_the_agreement_panel_reads_the_share_of_found_answers_that_agree(tmp_path):
    """3 of the 4 answers found agree: 75 %, however many were not found."""
    share = panels()["Shadow agreement"]["targets"][0]
    assert share["legendFormat"] == "{{variant}} agreement"
    checked = evaluate(tmp_path, share["expr"], [{"labels": '{variant="zero-layer"}', "value": 0.75}])
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_agreement_panel_counts_every_result_on_its_right_axis(tmp_path):
    panel = panels()["Shadow agreement"]
    counts = panel["targets"][1]
    per_interval = [
        {"labels": f'{{variant="zero-layer", result="{result}"}}', "value": per_minute * 2}
        for result, per_minute in (("agree", 3), ("differ", 1), ("missing", 4))
    ]
    checked = evaluate(tmp_path, counts["expr"], per_interval)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
    override = panel["fieldConfig"]["overrides"][0]
    assert override["matcher"]["options"] == counts["refId"]
    assert {p["id"]: p["value"] for p in override["properties"]} == {
        "unit": "short",
        "custom.axisPlacement": "right",
    }


def test_the_shadow_agreement_check_is_drawn_like_the_error_rate_check_as_a_share():
    shown = panels()
    shadow = shown["Check shadow_agreement: value and threshold"]
    errors = shown["Check error_rate: value and threshold"]
    assert shadow["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert [(t["expr"], t["legendFormat"]) for t in shadow["targets"]] == [
        (t["expr"].replace('check="error_rate"', 'check="shadow_agreement"'), t["legendFormat"])
        for t in errors["targets"]
    ]
    common = "The value the last analysis saw"
    assert shadow["description"].startswith(common)
    assert errors["description"].startswith(common)
    assert "floor" in shadow["description"]  # unlike the others, a value under the line fails


def test_the_agreement_panel_sits_beside_its_check():
    shown = panels()
    check = shown["Check shadow_agreement: value and threshold"]["gridPos"]
    beside = shown["Shadow agreement"]["gridPos"]
    assert (beside["y"], beside["x"]) == (check["y"], check["x"] + check["w"])
    assert beside["x"] + beside["w"] == 24
