"""The evidence a rollout accumulates look by look, and the checks it reads as: each regression fails its
own test with the evidence that crossed the bound, and the verdicts hold only what the data shows."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gateway.metrics.observations import ERRORS, REQUESTS, TTFT, CounterKey, stratum
from gateway.rollout.analysis import Verdict, analyse, by_name
from gateway.rollout.checks.base import Moment
from gateway.rollout.checks.latency import LatencyTests
from gateway.rollout.evidence import Evidence, add_look, busier_looks, start
from gateway.rollout.increments import increase, per_variant
from gateway.rollout.plan import CHECK_NAMES, Plan, plan_for
from gateway.spec.model import validate_spec
from gateway.spec.queries import PROBED
from tests.support.counting_provider import CountingProvider, Traffic
from tests.unit.test_spec import example

STAGE = "progressing:0"


def spec(rules: bool = False, **analysis):
    data = example(**{f"analysis__{k}": v for k, v in analysis.items()})
    if not rules:
        data["routing"]["rules"] = []
    return validate_spec(data)


def run(plan: Plan, looks: list[dict[str, Traffic]], stage: str = STAGE) -> Evidence:
    """The evidence after `looks` (per variant traffic each), through the real increments code."""
    provider = CountingProvider()
    evidence, previous = start(plan, stage, 0.0), None
    for traffic in [{}, *looks]:  # a first look with nothing: it sets where the counters start
        provider.per_look = traffic
        seen = _observe(provider)
        counters = seen.counters
        looks = per_variant(increase(previous, counters), ("baseline", "zero-layer"), counters, seen.samples)
        evidence = add_look(evidence, plan, looks, stage)
        previous = counters
    return evidence


def _observe(provider: CountingProvider):
    import asyncio

    return asyncio.run(provider.observe())


def checks(analysis_spec, evidence: Evidence, shadowing: bool = False):
    plan = plan_for(analysis_spec)
    return by_name(analyse(plan, evidence, Moment(shadowing=shadowing, weight_status=["ERASED"])))


def test_increments_are_taken_series_by_series_and_a_reset_is_a_new_start():
    key = CounterKey("zero-layer", REQUESTS, source="pod-a")
    other = CounterKey("zero-layer", REQUESTS, source="pod-b")
    errors = CounterKey("zero-layer", ERRORS, source="envoy")
    assert increase(None, {key: 500}) == {}  # the first look only sets the start
    grew = increase({key: 500, other: 40}, {key: 520, other: 10, errors: 3})
    assert grew[("zero-layer", REQUESTS, "", math.inf)] == 20 + 10  # pod-b restarted: its 10 are new
    assert grew[("zero-layer", ERRORS, "", math.inf)] == 3  # a series born since the last look counts from 0


def test_histogram_increments_become_each_strata_exceedances():
    bucket = stratum("default", "0-128")
    totals = {
        ("zero-layer", TTFT, bucket, 1.0): 8.0,
        ("zero-layer", TTFT, bucket, 2.0): 9.0,
        ("zero-layer", TTFT, bucket, math.inf): 10.0,
    }
    look = per_variant(totals, ["zero-layer"])["zero-layer"]
    assert look.ttft[bucket].above(2.0) == 1
    assert look.ttft[bucket].above(1.0) == 2


def test_a_healthy_candidate_passes_once_its_stage_has_enough_requests():
    rollout = spec()
    plan = plan_for(rollout)
    healthy = {"baseline": Traffic(19 * 400, 7), "zero-layer": Traffic(400)}
    few = checks(rollout, run(plan, [healthy]))
    assert few["error_rate"].verdict == Verdict.INCONCLUSIVE
    assert f"extending: 400 of the {plan.stage_requests} candidate requests" in few["error_rate"].reason
    enough = checks(rollout, run(plan, [healthy] * (plan.stage_requests // 400 + 1)))
    assert {name: c.verdict for name, c in enough.items()} == dict.fromkeys(enough, Verdict.PASS)
    assert enough["error_rate"].bound < rollout.analysis.max_error_rate  # its anytime upper bound


@pytest.mark.parametrize(
    ("traffic", "failing"),
    [
        ({"zero-layer": Traffic(400, 20)}, {"error_rate", "error_rate_change", "error_ratio"}),
        ({"zero-layer": Traffic(400, ttft=0.2)}, {"ttft_vs_baseline"}),  # 4x slower first tokens
        ({"zero-layer": Traffic(400, itl=0.1)}, {"itl_vs_baseline"}),  # 5x slower tokens
        ({"zero-layer": Traffic(400, ttft=3.0)}, {"ttft_p95", "ttft_vs_baseline"}),  # past the 2 s SLO
    ],
)
def test_each_regression_fails_its_own_test_with_the_evidence(traffic, failing):
    rollout = spec()
    plan = plan_for(rollout)
    looks = [{"baseline": Traffic(19 * 400), **traffic}] * 5
    result = checks(rollout, run(plan, looks))
    assert {name for name, c in result.items() if c.verdict == Verdict.FAIL} == failing
    for name in failing:
        check = result[name]
        assert check.log_evalue >= check.log_bound
        # the bound it crossed: its e-value's log(1/alpha), or its change detector's
        assert check.log_bound in (
            pytest.approx(math.log(1 / plan.alpha)),
            pytest.approx(plan.log_detector_bound),
        )
        assert not check.shared


def test_the_error_rate_fails_on_evidence_and_says_the_counts_and_bounds():
    rollout = spec()
    error_rate = checks(
        rollout, run(plan_for(rollout), [{"baseline": Traffic(7600), "zero-layer": Traffic(400, 20)}])
    )["error_rate"]
    assert error_rate.value == 20 / 400
    assert error_rate.samples == 400
    assert error_rate.bound > rollout.analysis.max_error_rate  # the anytime lower bound
    assert "20 errors in 400 candidate requests" in error_rate.reason


def test_a_failure_the_baseline_shares_is_marked_shared():
    rollout = spec()
    both = {"baseline": Traffic(7600, 380), "zero-layer": Traffic(400, 20)}  # both at 5 %
    result = checks(rollout, run(plan_for(rollout), [both] * 3))
    assert result["error_rate"].verdict == Verdict.FAIL
    assert result["error_rate"].shared
    assert "shared incident" in result["error_rate"].reason
    assert result["error_ratio"].verdict == Verdict.PASS  # the comparison sees no difference


def test_comparisons_use_only_randomised_traffic():
    """A segment pinned to the candidate carries its own load and prompts: it is no comparison."""
    rollout = spec(rules=True)  # high_load pinned to zero-layer, mobile split 80/20
    plan = plan_for(rollout)
    assert "error_ratio" not in plan.tests  # Envoy's counters cannot tell segments apart
    pinned_slow = [
        Traffic(400, ttft=0.05, segment="default"),
        Traffic(400, ttft=1.0, segment="high_load"),  # slow, but pinned: not a comparison
    ]
    result = checks(rollout, run(plan, [{"baseline": Traffic(7600), "zero-layer": pinned_slow}] * 5))
    assert result["ttft_vs_baseline"].verdict == Verdict.PASS
    split_slow = [Traffic(400, ttft=0.05), Traffic(400, ttft=1.0, segment="mobile")]
    mobile = [Traffic(7600), Traffic(1600, segment="mobile")]
    result = checks(rollout, run(plan, [{"baseline": mobile, "zero-layer": split_slow}] * 5))
    assert result["ttft_vs_baseline"].verdict == Verdict.FAIL  # a split segment is its own stratum


def test_latency_checks_with_nothing_to_judge_say_so_and_do_not_hold_the_rollout():
    rollout = spec()
    plan = plan_for(rollout)
    no_latency = run(plan, [{"baseline": Traffic(7600), "zero-layer": Traffic(400)}], stage=STAGE)
    no_latency = replace(
        no_latency,
        tests={**no_latency.tests, "ttft_vs_baseline": LatencyTests(), "itl_vs_baseline": LatencyTests()},
    )
    result = checks(rollout, no_latency)
    for name in ("ttft_vs_baseline", "itl_vs_baseline"):
        assert result[name].verdict == Verdict.PASS
        assert result[name].samples == 0
        assert "nothing to judge" in result[name].reason


def test_checks_that_are_off_do_not_run():
    rollout = spec(
        max_error_ratio=None, max_latency_ratio=None, max_ttft_p95=None, expected_weight_status=None
    )
    result = checks(
        rollout, run(plan_for(rollout), [{"baseline": Traffic(7600), "zero-layer": Traffic(400)}])
    )
    assert set(result) == {"error_rate", "error_rate_change"}
    off = dict(plan_for(rollout).off)  # what `graystack status` lists as off, and why
    assert set(off) == set(CHECK_NAMES) - {"error_rate", "error_rate_change"}  # the rest are opt-in
    assert "null" in off["weight_status"]


def test_the_budget_is_split_across_the_tests_that_run():
    assert plan_for(spec()).alpha == pytest.approx(0.01 / 5)  # errors, ratio, SLO, TTFT and ITL shifts
    assert plan_for(spec(rules=True)).alpha == pytest.approx(0.01 / 4)
    assert plan_for(spec(min_shadow_agreement=0.9)).alpha == pytest.approx(0.01 / 6)


def test_shadow_agreement_is_judged_only_in_a_shadow_stage():
    rollout = spec(min_shadow_agreement=0.9)
    plan = plan_for(rollout)
    agreeing = run(plan, [{"baseline": Traffic(7600), "zero-layer": Traffic(400, compared=400, differed=1)}])
    assert "shadow_agreement" not in checks(rollout, agreeing)
    check = checks(rollout, agreeing, shadowing=True)["shadow_agreement"]
    assert (check.verdict, check.samples, check.value) == (Verdict.PASS, 400, 399 / 400)
    assert "399 of 400 shadow answers equal the baseline's" in check.reason
    worse = run(plan, [{"baseline": Traffic(7600), "zero-layer": Traffic(400, compared=400, differed=120)}])
    assert checks(rollout, worse, shadowing=True)["shadow_agreement"].verdict == Verdict.FAIL
    none = run(plan, [{"baseline": Traffic(7600), "zero-layer": Traffic(400)}])
    assert checks(rollout, none, shadowing=True)["shadow_agreement"].verdict == Verdict.INCONCLUSIVE


def test_latency_is_compared_only_where_the_candidates_pods_are_no_busier_than_the_baselines():
    """70/30 over one pod each: the candidate's queues, not its code, make its tokens slower."""
    rollout = spec()
    plan = plan_for(rollout)
    slower_tokens = {"zero-layer": Traffic(700, itl=0.05), "baseline": Traffic(300, itl=0.02)}
    busier = run(plan, [slower_tokens] * 5)
    assert busier_looks(busier) == 5
    assert checks(rollout, busier)["itl_vs_baseline"].verdict == Verdict.PASS
    assert "5 looks left out" in checks(rollout, busier)["itl_vs_baseline"].reason
    balanced = run(plan, [{"zero-layer": Traffic(500, itl=0.05), "baseline": Traffic(500, itl=0.02)}] * 5)
    assert busier_looks(balanced) == 0
    assert checks(rollout, balanced)["itl_vs_baseline"].verdict == Verdict.FAIL
    lighter = run(plan, [{"zero-layer": Traffic(100, itl=0.05), "baseline": Traffic(900, itl=0.02)}] * 5)
    assert checks(rollout, lighter)["itl_vs_baseline"].verdict == Verdict.FAIL  # slower even when less busy


def test_a_handful_of_requests_does_not_show_the_candidate_is_no_busier():
    """The first looks of a stream load at 70/30 (12 users, one pod each; requests per look as a CI run
    saw them): a look of 1 against 3 says nothing of the load, so none of them compares latency (the
    CI run that compared them rolled the healthy, busier candidate back on its inter-token latency)."""
    rollout = spec()
    plan = plan_for(rollout)
    counts = [(3, 0), (1, 3), (5, 5), (5, 1), (7, 3), (7, 5), (3, 3), (4, 0), (5, 6), (7, 4), (6, 2), (6, 6)]
    looks = [
        {"zero-layer": Traffic(ours, itl=0.05), "baseline": Traffic(theirs, itl=0.02)}
        for ours, theirs in counts
    ]
    evidence = run(plan, looks)
    assert busier_looks(evidence) == len(counts)
    assert checks(rollout, evidence)["itl_vs_baseline"].verdict == Verdict.PASS


def test_servers_with_no_ttft_histogram_are_compared_on_the_probes_requests():
    """llama.cpp and `transformers serve` export no TTFT histogram: the probes' synthetic requests (their
    own stratum) are what TTFT is judged on, and the check says so; where the servers do export one,
    the probes' requests are not counted again. (On the histograms: the default, the gateway's own
    measurement of every answer, gives such servers their routed traffic to judge.)"""
    rollout = spec(latency_source="histograms")
    plan = plan_for(rollout)
    probed_only = [
        {
            "zero-layer": Traffic(500, ttft=1.0, itl=0.02, segment=PROBED),
            "baseline": Traffic(500, ttft=0.1, itl=0.02, segment=PROBED),
        }
    ] * 5
    evidence = run(plan, probed_only)
    check = checks(rollout, evidence)["ttft_vs_baseline"]
    assert check.verdict == Verdict.FAIL
    assert "2500 from the probes' requests" in check.reason
    slo = checks(rollout, evidence)["ttft_p95"]
    assert slo.samples == 2500  # the SLO reads them too

    both = [
        {
            "zero-layer": [Traffic(500, ttft=0.1), Traffic(5, ttft=1.0, segment=PROBED)],
            "baseline": [Traffic(500, ttft=0.1), Traffic(5, ttft=0.1, segment=PROBED)],
        }
    ] * 5
    served = run(plan, both)
    assert served.tests["ttft_vs_baseline"].probed == 0
    assert served.tests["ttft_vs_baseline"].seen == 2500
    assert checks(rollout, served)["ttft_vs_baseline"].verdict == Verdict.PASS


MISMATCH = "the file is ERASED sha256:fedcba9876543210, the server loaded ACTIVE sha256:0123456789abcdef"


@pytest.mark.parametrize(
    ("statuses", "mismatches", "verdict", "named"),
    [
        (["ERASED"], [], Verdict.PASS, ["all 1 pods as expected"]),
        (
            ["ERASED", "ERASED"],
            [MISMATCH],
            Verdict.FAIL,
            [f"did not load its probe's checkpoint: {MISMATCH}"],
        ),
        ([], [MISMATCH], Verdict.FAIL, [MISMATCH]),  # evidence against, before missing evidence holds
        (["ACTIVE"], [MISMATCH], Verdict.FAIL, ["pods report ['ACTIVE']", MISMATCH]),  # every finding
    ],
)
def test_a_probe_finding_its_server_did_not_load_its_file_fails_the_weight_status(
    statuses, mismatches, verdict, named
):
    rollout = spec()
    plan = plan_for(rollout)
    evidence = run(plan, [{"baseline": Traffic(400), "zero-layer": Traffic(400)}])
    found = by_name(analyse(plan, evidence, Moment(weight_status=statuses, mismatches=mismatches)))
    check = found["weight_status"]
    assert check.verdict == verdict
    assert all(part in check.reason for part in named), check.reason


def test_with_the_weight_status_check_off_a_mismatch_is_not_judged():
    rollout = spec(expected_weight_status=None)
    plan = plan_for(rollout)
    evidence = run(plan, [{"baseline": Traffic(400), "zero-layer": Traffic(400)}])
    found = by_name(analyse(plan, evidence, Moment(mismatches=[MISMATCH])))
    assert "weight_status" not in found
