"""The dashboards and alert rules as the code generates them: the committed files are what it builds, every
`graystack_*` (and `gen_ai_*`) family a query reads is one the parts export, and each dashboard filters by namespace,
rollout and variant. (No Grafana server runs here: tests/integration/test_observability_live.py sends
every query to a real Prometheus instead.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gateway.answers import telemetry as answers_metrics
from gateway.rollout import telemetry as rollout_metrics
from gateway.rollout.analysis import analyse
from gateway.rollout.checks.base import Moment
from gateway.rollout.evidence import start
from gateway.rollout.plan import plan_for
from gateway.spec.model import validate_spec
from gateway.spec.strategy import Analysis
from gateway.xds import telemetry as xds_metrics
from graystack.observability import alerts, dashboards
from graystack.observability.__main__ import main
from graystack.observability.files import ALERTS_FILE, outputs
from inference.server.telemetry import TTFT_BUCKETS, ServerMetrics
from probes.telemetry import ProbeMetrics

ROOT = Path(__file__).resolve().parents[2]
FAMILY = re.compile(
    r"\b(?:graystack_\w+|gen_ai_\w+\b(?!\s*[=!])|vllm:\w+|process_\w+)"
)  # not a label: gen_ai_token_type
# vLLM's own families that a panel sums with graystack's: a vLLM pod exports them, graystack's servers count
# the same thing under their own name.
VLLM_ONLY = {"vllm:generation_tokens_total"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_sample_names() -> set[str]:
    """Every sample name the gateway, a model server and a probe expose (as Prometheus stores them)."""
    registry = CollectorRegistry()
    for module in (rollout_metrics, xds_metrics, answers_metrics):
        for metric in vars(module).values():
            if hasattr(metric, "_name") and hasattr(metric, "collect"):
                registry.register(metric)
    families = [
        *registry.collect(),
        *ServerMetrics("baseline", "tiny").registry.collect(),
        *ProbeMetrics().registry.collect(),
    ]
    return {f"{f.name}{suffix}" for f in families for suffix in SUFFIXES.get(f.type, ("",))}


def all_queries() -> list[tuple[str, str]]:
    found = [
        (f"{name}: {where}", expr)
        for name in dashboards.DASHBOARDS
        for where, expr in dashboards.queries(json.loads(dashboards.render(name)))
    ]
    found += [
        (f"alert {r['alert']}", r["expr"]) for group in alerts.rules()["groups"] for r in group["rules"]
    ]
    return found


def test_the_committed_files_are_what_the_code_generates():
    stale = [str(p) for p, text in outputs().items() if (ROOT / p).read_text() != text]
    assert not stale, f"{stale} differ from graystack/observability: run `make dashboards` and commit"
    assert main(["--check", "--root", str(ROOT)]) == 0


def test_the_check_mode_names_a_file_that_was_edited_by_hand(tmp_path, capsys):
    assert main(["--root", str(tmp_path)]) == 0
    edited = tmp_path / ALERTS_FILE
    edited.write_text(edited.read_text().replace("0.003", "0.3"))
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert str(ALERTS_FILE) in capsys.readouterr().out


def test_every_graystack_family_a_query_reads_is_exported_by_a_part():
    exported = exported_sample_names()
    unknown = {
        (where, name)
        for where, expr in all_queries()
        for name in FAMILY.findall(expr)
        if name not in exported | VLLM_ONLY
    }
    assert not unknown
    # a graystack server exporting vLLM's name too would have its tokens counted twice
    assert not exported & VLLM_ONLY


@pytest.mark.parametrize("name", list(dashboards.DASHBOARDS))
def test_each_dashboard_filters_by_namespace_rollout_and_variant(name):
    board = json.loads(dashboards.render(name))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "rollout", "variant"}
    # the local stack's series have no namespace: its "All" must match an absent label
    assert variables["namespace"]["allValue"] == ".*"
    assert re.fullmatch(variables["namespace"]["allValue"], "")
    for where, expr in dashboards.queries(board):
        assert 'namespace=~"$namespace"' in expr, where
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["description"], panel["title"]
            refs = [t["refId"] for t in panel["targets"]]
            assert all(refs), panel["title"]
            assert len(refs) == len(set(refs)), panel["title"]


def test_the_rollout_dashboard_plots_every_check_the_analysis_runs():
    every_check = validate_spec(  # no header rules (error_ratio runs), every answer-quality check asked for
        {
            "name": "zero-layer",
            "variants": {
                "baseline": {"endpoints": ["127.0.0.1:8001"]},
                "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
            },
            "routing": {"weights": {"baseline": 100, "zero-layer": 0}},
            "analysis": {
                "min_shadow_agreement": 0.9,
                "quality": {
                    "structure": True,
                    "max_cut_ratio": 1.5,
                    "judge": {"url": "http://judge:8000/v1", "model": "judge"},
                },
            },
        }
    )
    plan = plan_for(every_check)
    evidence = start(plan, "shadow:0", 0.0)
    ran = {c.name for c in analyse(plan, evidence, Moment(shadowing=True, weight_status=["ERASED"]))}
    board = json.loads(dashboards.render("rollout-decisions"))
    plotted = {m for _, expr in dashboards.queries(board) for m in re.findall(r'check="(\w+)"', expr)}
    assert plotted == set(dashboards.CHECKS)
    # without a value (or without one most of the time): drawn on the evidence panel only
    assert ran == plotted | {
        "error_rate_change",
        "error_ratio",
        "itl_vs_baseline",
        "structure",
        "length_cut",
        "judge",
    }
    evidence_panel = [
        expr for _, expr in dashboards.queries(board) if "graystack_analysis_log_evalue" in expr
    ]
    assert evidence_panel  # every sequential test's log e-value and bound, by check


def test_the_ttft_objective_is_a_bucket_edge_of_the_servers_histogram():
    """Otherwise `le="2"` would select no bucket and the burn-rate alerts could never fire."""
    assert Analysis().max_ttft_p95 in TTFT_BUCKETS


def test_the_rules_file_is_a_prometheus_rules_file_with_a_severity_and_dashboard_per_alert():
    loaded = yaml.safe_load((ROOT / ALERTS_FILE).read_text())
    rules = [r for group in loaded["groups"] for r in group["rules"]]
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    uids = {json.loads(dashboards.render(n))["uid"] for n in dashboards.DASHBOARDS}
    for r in rules:
        assert r["labels"]["severity"] in {"warning", "critical"}, r["alert"]
        assert r["annotations"]["dashboard"].removeprefix("/d/") in uids, r["alert"]
