"""Checks carry their verdict with the evidence behind it."""

from dataclasses import replace

from gateway.rollout.analysis import Observations, VariantWindow, analyse
from gateway.rollout.spec import Analysis
from gateway.rollout.stats import Verdict

SPEC = Analysis()  # DESIGN's defaults: 0.3 %, p99 ratio 1.5, TTFT p95 2 s, ERASED/ZEROED, 100 requests


def verdicts(seen: Observations) -> dict[str, Verdict]:
    return {c.name: c.verdict for c in analyse(SPEC, seen, "zero-layer", "baseline")}


def window(requests, errors, p99=0.2, ttft=0.3) -> VariantWindow:
    return VariantWindow(requests=requests, errors=errors, latency_p99=p99, ttft_p95=ttft)


def test_a_healthy_variant_passes_every_check():
    seen = Observations(
        variants={"zero-layer": window(1500, 0, p99=0.15), "baseline": window(20000, 10)},
        weight_status={"zero-layer": ["ERASED", "ERASED"]},
    )
    assert set(verdicts(seen).values()) == {Verdict.PASS}


def test_too_little_traffic_is_inconclusive_not_a_pass():
    seen = Observations(
        variants={"zero-layer": window(40, 0), "baseline": window(800, 0)},
        weight_status={"zero-layer": ["ZEROED"]},
    )
    result = verdicts(seen)
    assert result["error_rate"] == result["latency_ratio"] == result["ttft_p95"] == Verdict.INCONCLUSIVE
    assert result["weight_status"] == Verdict.PASS


def test_each_regression_fails_its_own_check_with_the_evidence():
    seen = Observations(
        variants={"zero-layer": window(400, 20, p99=0.5, ttft=2.5), "baseline": window(8000, 2, p99=0.2)},
        weight_status={"zero-layer": ["ERASED", "ACTIVE"]},
    )
    checks = {c.name: c for c in analyse(SPEC, seen, "zero-layer", "baseline")}
    assert {name: c.verdict for name, c in checks.items()} == dict.fromkeys(checks, Verdict.FAIL)
    error_rate = checks["error_rate"]
    assert error_rate.value == 0.05
    assert error_rate.samples == 400
    assert error_rate.bound > SPEC.max_error_rate  # the lower confidence bound, above the threshold
    assert checks["latency_ratio"].value == 2.5
    assert "ACTIVE" in checks["weight_status"].reason


def test_a_metrics_source_that_is_down_is_an_error_not_a_failure():
    result = verdicts(Observations(error="prometheus: connection refused"))
    assert set(result.values()) == {Verdict.ERROR}


def shadow(compared: int, agreed: int) -> Observations:
    candidate = replace(window(2000, 0), shadow_compared=compared, shadow_agreed=agreed)
    return Observations(
        variants={"zero-layer": candidate, "baseline": window(20000, 10)},
        weight_status={"zero-layer": ["ERASED"]},
    )


def test_shadow_agreement_is_judged_only_where_copies_were_compared_and_only_when_asked():
    asked = Analysis(min_shadow_agreement=0.9)
    assert [c.name for c in analyse(asked, shadow(0, 0), "zero-layer", "baseline")][-1] == "weight_status"
    assert [c.name for c in analyse(Analysis(), shadow(500, 500), "zero-layer", "baseline")][
        -1
    ] == "weight_status"
    agreeing = analyse(asked, shadow(500, 498), "zero-layer", "baseline")[-1]
    assert (agreeing.name, agreeing.verdict, agreeing.samples) == ("shadow_agreement", Verdict.PASS, 500)
    assert agreeing.value == 498 / 500
    assert "498 of 500 shadow answers equal the baseline's" in agreeing.reason
    worse = analyse(asked, shadow(500, 350), "zero-layer", "baseline")[-1]
    assert worse.verdict == Verdict.FAIL  # 70 % agreement, clearly below 90 %: the guard rolls back
    assert worse.bound < 0.9
    assert analyse(asked, shadow(20, 17), "zero-layer", "baseline")[-1].verdict == Verdict.INCONCLUSIVE


def test_a_shadow_stage_with_no_compared_answer_holds_when_agreement_is_asked_for():
    """Copies served but none compared (e.g. a candidate started without --compare-with): the stage
    must not pass on the other checks alone."""
    asked = Analysis(min_shadow_agreement=0.9)
    held = analyse(asked, shadow(0, 0), "zero-layer", "baseline", shadowing=True)[-1]
    assert (held.name, held.verdict) == ("shadow_agreement", Verdict.INCONCLUSIVE)
    assert "--compare-with" in held.reason
    unasked = analyse(Analysis(), shadow(0, 0), "zero-layer", "baseline", shadowing=True)
    assert [c.name for c in unasked][-1] == "weight_status"


DERIVED = Analysis(expected_weight_status=["ACTIVE"], max_effective_window=64)


def weight_check(spec: Analysis, statuses: list[str], windows: list[int] | None):
    seen = Observations(
        variants={"zero-layer": window(1500, 0), "baseline": window(20000, 10)},
        weight_status={"zero-layer": statuses} if statuses else {},
        effective_windows={"zero-layer": windows} if windows is not None else {},
    )
    return {c.name: c for c in analyse(spec, seen, "zero-layer", "baseline")}["weight_status"]


def test_a_bound_on_the_effective_window_passes_pods_serving_the_derived_sparse_bias():
    check = weight_check(DERIVED, ["ACTIVE", "ACTIVE"], [64, 53])
    assert check.verdict == Verdict.PASS
    assert check.reason == "all 2 pods as expected, effective windows [53, 64] within 64"
    erased = Analysis(max_effective_window=64)  # ERASED/ZEROED serve no bias: a window of 0
    assert weight_check(erased, ["ERASED"], [0]).verdict == Verdict.PASS


def test_an_active_pod_whose_bias_spans_a_wider_window_fails_naming_it():
    check = weight_check(DERIVED, ["ACTIVE", "ACTIVE"], [64, 128])
    assert check.verdict == Verdict.FAIL
    assert check.reason == "pods serve effective window [128], above max_effective_window 64"
    assert (
        weight_check(DERIVED, [], [10240]).verdict == Verdict.FAIL
    )  # evidence, though no probe has reported
    assert "ZEROED" in weight_check(DERIVED, ["ZEROED"], [0]).reason  # the status is judged as before


def test_a_bound_without_any_reported_window_is_inconclusive():
    check = weight_check(DERIVED, ["ACTIVE"], None)
    assert check.verdict == Verdict.INCONCLUSIVE
    assert check.reason == "no model server has reported its effective window"


def test_without_a_bound_the_windows_change_nothing():
    unbounded = Analysis(expected_weight_status=["ACTIVE"])
    for windows in (None, [10240]):
        check = weight_check(unbounded, ["ACTIVE"], windows)
        assert (check.verdict, check.reason) == (Verdict.PASS, "all 1 pods as expected")
