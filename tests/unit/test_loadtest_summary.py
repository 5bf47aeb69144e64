"""The end-of-run verdict, which becomes Locust's exit code, and the report written to the run folder."""

import json

from loadtests.config import NO_HEADER
from loadtests.conversation import Stickiness
from loadtests.split import SplitTracker, Tally, report_bins
from loadtests.summary import Objectives, Summary, VariantStats, judge, render, write

DEFAULTS = Objectives()
LATENCY = {"ttft": {"p50": 0.1, "p95": 0.4, "p99": 0.9}, "e2e": {"p50": 1.0, "p95": 2.0, "p99": 3.0}}


def split_result(zero_layer_served: float):
    """One period configured 20 % zero-layer; `zero_layer_served` of 500 requests went there."""
    tracker, tally = SplitTracker(), Tally()
    tracker.observe(0, 0.01, {"weights": {"baseline": 80, "zero-layer": 20}})
    for i in range(500):
        variant = "zero-layer" if i % 100 < zero_layer_served * 100 else "baseline"
        tally.record(2 + i / 100, NO_HEADER, variant, failed=False)
    tracker.observe(20, 20.01, {"weights": {"baseline": 80, "zero-layer": 20}})
    tracker.add(report_bins(tally.drain()))
    return tracker.result()


def summary(failures=(0, 0), split=None, objectives=DEFAULTS, exceptions=0, requests=(400, 100)) -> Summary:
    variants = [
        VariantStats("baseline", requests[0], failures[0], LATENCY),
        VariantStats("zero-layer", requests[1], failures[1], LATENCY),
    ]
    return judge(Summary(variants, sum(requests), sum(failures), exceptions, split, objectives))


def test_a_clean_run_within_its_split_passes_with_exit_code_0():
    result = summary(split=split_result(0.2), objectives=Objectives(split_required=True))
    assert (result.verdict, result.exit_code, result.reasons) == ("pass", 0, [])


def test_a_variant_over_the_error_budget_fails_even_when_the_whole_run_is_within_it():
    result = summary(failures=(0, 2), requests=(9900, 100), objectives=Objectives(max_error_rate=0.01))
    assert result.exit_code == 1
    assert result.reasons == ["zero-layer: error rate 2.000% above the budget"]


def test_a_split_off_its_weights_fails():
    result = summary(split=split_result(0.4))
    assert result.exit_code == 1
    assert result.reasons == ["split: 2 of 2 shares outside their interval"]


def test_latency_objectives_are_checked_only_when_set():
    assert summary().verdict == "pass"
    result = summary(objectives=Objectives(max_ttft_p95=0.2, max_e2e_p99=5))
    assert result.reasons == [
        "baseline: ttft p95 0.400s above the 0.200s objective",
        "zero-layer: ttft p95 0.400s above the 0.200s objective",
    ]


def test_user_code_that_raised_fails_the_run():
    assert summary(exceptions=3).reasons == ["the load test's own code raised 3 time(s)"]


def test_no_answer_or_no_comparable_period_is_inconclusive_with_exit_code_2():
    assert summary(requests=(0, 0)).exit_code == 2
    result = summary(objectives=Objectives(split_required=True))
    assert (result.verdict, result.exit_code) == ("inconclusive", 2)


def test_the_report_names_each_period_s_configured_and_observed_share(tmp_path):
    result = summary(split=split_result(0.4))
    write(result, 0.0, tmp_path)
    text = (tmp_path / "summary.txt").read_text()
    assert "graystack load test: FAIL (exit 1)" in text
    assert "client - zero-layer: configured 20.0%, observed 40.0% (200/500)" in text
    assert "OFF" in text
    body = json.loads((tmp_path / "summary.json").read_text())
    assert body["exit_code"] == 1
    assert body["split"]["ok"] is False
    assert body["variants"][0]["latency"]["ttft"]["p95"] == 0.4
    assert render(result, 0.0) + "\n" == text


def test_the_conversations_line_appears_only_when_conversation_users_ran(tmp_path):
    plain = summary()
    assert "conversations" not in render(plain, 0)
    plain.conversations = Stickiness(turns=200, same_variant=200, pod_turns=100, same_pod=50)
    text = render(plain, 0)
    assert "of 200 turns after a first, 100.0% reached the variant" in text
    assert "50.0% its pod (50/100 named)" in text
    write(plain, 0, tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())["conversations"]
    assert (written["variant_share"], written["pod_share"]) == (1.0, 0.5)
    plain.conversations = Stickiness(turns=10, same_variant=5)
    assert "pods: not named by the servers" in render(plain, 0)
