"""strategy: experiment's report where people and tools read it: GET /v1/experiment, the rollout section
of GET /v1/status, `graystack status` and `graystack experiment`."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from gateway.admin.api import create_admin_app
from gateway.admin.protocol import ExperimentStatus, Status
from gateway.rollout import evidence as tests
from gateway.rollout.checks.experiment import EXPERIMENT as ROW
from gateway.rollout.checks.experiment import ExperimentTests
from gateway.rollout.plan import plan_for
from gateway.rollout.rollout_state import Phase, RolloutState
from gateway.rollout.telemetry import record_experiment
from gateway.rollout.views import experiment_status
from gateway.xds.server import AdsServer
from graystack.cli.root import main
from graystack.console.status_view import experiment_lines, render_status
from tests.support.clock import FakeClock
from tests.unit.test_experiment_strategy import EXPERIMENT_5050, make_spec
from tests.unit.test_rollout_controller import new_controller, new_gateway, spec_data

EXPERIMENT = {"experiment": {"weights": {"baseline": 50, "zero-layer": 50}, "duration": "2h"}}


def _admin(tmp_path, strategy):
    data = spec_data(strategy=strategy)
    data["routing"].pop("rules", None)  # the error counts compare only where no header rule splits segments
    gateway = new_gateway(data)
    clock = FakeClock()
    controller = new_controller(gateway, tmp_path, clock)
    for _ in range(3):
        asyncio.run(controller.tick())
        clock.now += 5
    return TestClient(create_admin_app(gateway, AdsServer(gateway.cache), controller=controller))


def test_the_report_is_served_as_json_and_in_status_and_rendered(tmp_path):
    with _admin(tmp_path, EXPERIMENT) as admin:
        report = ExperimentStatus.model_validate(admin.get("/v1/experiment").json())
        status = Status.model_validate(admin.get("/v1/status").json())
    assert (report.candidate, report.baseline, report.alpha, report.duration) == (
        "zero-layer",
        "baseline",
        0.05,
        7200,
    )
    (errors,) = [d for d in report.differences if d.name == "error_rate"]
    assert errors.samples[0] > 0
    assert errors.lower <= 0 <= (errors.upper or 0)
    assert not errors.decided
    ratios = {d.name: d for d in report.differences if d.kind == "ratio"}  # the provider's answers: alike
    assert set(ratios) == {"ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"}
    assert all(d.lower <= 1 <= (d.upper or 1) and not d.decided for d in ratios.values())
    assert status.rollout.experiment == report
    exported = REGISTRY.get_sample_value(
        "graystack_experiment_difference",
        {"rollout": "zero-layer", "difference": "ttft_p50", "side": "lower"},
    )
    assert exported == ratios["ttft_p50"].lower  # the metric the dashboard's Experiment row draws
    assert (status.rollout.phase, status.rollout.weight) == ("experiment", 50)
    assert status.rollout.evidence is not None
    assert status.rollout.evidence.stage_requests_needed is None  # it never extends past its duration
    text = render_status(status)
    assert "experiment zero-layer vs baseline running, 15s of 7200s: not every difference decided" in text
    assert "  error_rate " in text
    assert "undecided" in text
    # no quality section: each quality interval is left out, with why
    assert report.quality == []
    assert [why.split(" ")[0] for why in report.quality_not_compared] == [
        "structure_failures",
        "greedy_agreement",
        "judge_win_rate",
    ]
    assert all("(off: " in why for why in report.quality_not_compared)
    assert "  not compared: judge_win_rate (off: analysis.quality has no judge)" in text


def test_the_quality_intervals_reach_the_json_the_console_and_the_gauge() -> None:
    quality = {"capture_percent": 10, "structure": True, "max_greedy_disagreement": 0.05,
               "judge": {"url": "http://judge:8000/v1", "model": "judge"}}  # fmt: skip
    spec = make_spec({"experiment": EXPERIMENT_5050}, analysis={"interval": "5s", "quality": quality})
    evidence = tests.start(plan_for(spec), "experiment:0", 0.0)
    counts = ExperimentTests(checked=(400, 400), malformed=(40, 4), greedy=(50, 5), judged=(40, 30, 6))
    state = RolloutState(Phase.EXPERIMENT, weight=50, evidence=replace(evidence, tests={ROW: counts}))
    restored = RolloutState.from_dict(json.loads(json.dumps(state.to_dict()))).evidence
    assert restored is not None
    assert restored.tests[ROW] == counts  # the quality counts are kept in the saved state
    report = experiment_status(spec, state, 0.0)
    assert report is not None
    shape = report.model_dump(mode="json")
    assert [d["name"] for d in shape["quality"]] == [
        "structure_failures",
        "greedy_agreement",
        "judge_win_rate",
    ]
    assert shape["quality_not_compared"] == []
    structure, agreement, judge = shape["quality"]
    assert structure | {"lower": 0, "upper": 0, "estimate": round(structure["estimate"], 9)} == {
        "name": "structure_failures", "kind": "difference", "estimate": 0.09, "lower": 0, "upper": 0,
        "samples": [400, 400], "decided": True, "null": 0.0, "ties": None,
    }  # fmt: skip
    assert (agreement["kind"], agreement["estimate"], agreement["null"], agreement["samples"]) == (
        "share",
        0.9,
        1.0,
        [50, 50],
    )
    assert (judge["estimate"], judge["null"], judge["ties"]) == (0.75, 0.5, 6)
    assert ExperimentStatus.model_validate(shape) == report
    text = "\n".join(experiment_lines(report))
    assert "  quality (reported beside; the decision does not wait for it):" in text
    assert "  judge_win_rate    75.00% [" in text
    assert "pairs 40, ties 6 (left out)" in text
    record_experiment("quality-test", report)
    exported = REGISTRY.get_sample_value(
        "graystack_experiment_difference",
        {"rollout": "quality-test", "difference": "judge_win_rate", "side": "estimate"},
    )
    assert exported == 0.75


def test_a_rollout_that_is_no_experiment_has_no_report(tmp_path):
    with _admin(tmp_path, {"steps": [{"weight": 5, "hold": "10m"}, {"weight": 100}]}) as admin:
        assert admin.get("/v1/experiment").status_code == 404
        assert admin.get("/v1/status").json()["rollout"].get("experiment") is None


def test_graystack_experiment_prints_the_report_and_writes_it(tmp_path, monkeypatch: pytest.MonkeyPatch):
    with _admin(tmp_path, EXPERIMENT) as admin:
        answer = admin.get("/v1/experiment")
    report = ExperimentStatus.model_validate(answer.json())
    monkeypatch.setattr("graystack.admin_client.AdminClient.experiment", lambda self: report)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["experiment", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("experiment zero-layer vs baseline running")
    assert ExperimentStatus.model_validate(json.loads(out.read_text())) == report
