"""`analysis.latency_source: answers`: the latency comparisons judge the exact time of every answer the
gateway measured (gateway/metrics/answered.py's samples, ExactShiftTest), for any server; with answers
missing they hold, never pass. Through the real evidence and analysis code, seeded."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gateway.metrics.observations import ITL, TTFT, SampleKey, stratum
from gateway.names import DEFAULT_SEGMENT
from gateway.rollout.analysis import Verdict, analyse, by_name
from gateway.rollout.checks.base import Moment
from gateway.rollout.evidence import Evidence, add_look, start
from gateway.rollout.increments import VariantLook
from gateway.rollout.plan import plan_for
from gateway.spec.model import validate_spec
from tests.unit.test_spec import example

STAGE = "progressing:0"
TTFT_STRATUM = stratum(DEFAULT_SEGMENT, "129-512")


def spec(**analysis):
    data = example(**{f"analysis__{k}": v for k, v in {"latency_source": "answers", **analysis}.items()})
    data["routing"]["rules"] = []
    return validate_spec(data)


def looks(slowdown: float, n: int, rng: np.random.Generator, answered: bool = True) -> dict[str, VariantLook]:
    """One look: `n` requests to each variant, TTFT lognormal around 0.3 s, the candidate `slowdown` times."""

    def variant(scale: float) -> VariantLook:
        values = tuple(scale * 0.3 * rng.lognormal(0, 0.3, n)) if answered else ()
        return VariantLook(
            requests=n,
            ttft_values={TTFT_STRATUM: values} if answered else {},
            itl_values={stratum(DEFAULT_SEGMENT): tuple(v / 30 for v in values)} if answered else {},
        )

    return {"baseline": variant(1.0), "zero-layer": variant(slowdown)}


def run(rollout, slowdown: float, n_looks: int, answered: bool = True, seed: int = 7) -> Evidence:
    plan, rng = plan_for(rollout), np.random.default_rng(seed)
    evidence = start(plan, STAGE, 0.0)
    for _ in range(n_looks):
        evidence = add_look(evidence, plan, looks(slowdown, 4, rng, answered), STAGE)
    return evidence


def checks(rollout, evidence: Evidence):
    return by_name(analyse(plan_for(rollout), evidence, Moment(weight_status=["ERASED"])))


def test_a_slower_first_token_fails_on_the_answers_exact_times():
    rollout = spec()  # the example tolerates 1.5x
    assert plan_for(rollout).settings["ttft_vs_baseline"].max_ratio == 1.5
    found = checks(rollout, run(rollout, slowdown=2.5, n_looks=60))
    assert found["ttft_vs_baseline"].verdict == Verdict.FAIL
    assert "each answer's exact time" in found["ttft_vs_baseline"].reason
    assert found["itl_vs_baseline"].verdict == Verdict.FAIL  # its tokens come as much slower


def test_an_equal_candidate_passes_and_the_histogram_tests_are_not_run():
    rollout = spec()
    evidence = run(rollout, slowdown=1.0, n_looks=60)
    found = checks(rollout, evidence)
    assert found["ttft_vs_baseline"].verdict == Verdict.PASS
    # every look both variants answered in, but those before the load ratio was bounded (busier pods)
    comparisons = [evidence.tests[name] for name in ("ttft_vs_baseline", "itl_vs_baseline")]
    assert 0 < found["ttft_vs_baseline"].samples == comparisons[0].seen < 240
    assert [c.shift for c in comparisons] == [None, None]


def test_with_the_answers_missing_the_latency_checks_hold_and_say_why():
    rollout = spec()
    found = checks(rollout, run(rollout, slowdown=1.5, n_looks=10, answered=False))
    for name in ("ttft_vs_baseline", "itl_vs_baseline", "ttft_p95"):
        assert found[name].verdict == Verdict.INCONCLUSIVE
        assert found[name].reason.startswith("measurements missing: Envoy sent the candidate 40 requests")


def test_answers_are_the_default_source_and_histograms_keep_the_key_rollouts_were_saved_under():
    histograms = plan_for(spec(latency_source="histograms"))
    data = example()
    data["routing"]["rules"] = []
    default = plan_for(validate_spec(data))
    assert (default.exact_latency, histograms.exact_latency) == (True, False)
    assert default.key == plan_for(spec()).key != histograms.key  # a change of source starts new tests
    settings = {k: v for k, v in data["analysis"].items() if k != "latency_source"}
    saved_before = {**data, "analysis": {**settings, "latency_source": "histograms"}}
    assert plan_for(validate_spec(saved_before)).key == histograms.key


def test_the_ttft_slo_counts_the_answers_slower_than_the_slo_itself():
    rollout = spec()  # the example's SLO: p95 at most 2 s
    slow = checks(rollout, evidence := run(rollout, slowdown=8.0, n_looks=60))  # most first tokens ~2.4 s
    assert evidence.tests["ttft_p95"].edge == 2.0
    assert slow["ttft_p95"].verdict == Verdict.FAIL
    assert "each answer's exact time" in slow["ttft_p95"].reason
    assert checks(rollout, run(rollout, slowdown=1.0, n_looks=60))["ttft_p95"].verdict == Verdict.PASS


def test_the_answers_samples_are_the_looks_exact_values_per_variant_and_stratum():
    from gateway.rollout.increments import per_variant

    samples = {
        SampleKey("zero-layer", TTFT, TTFT_STRATUM): (0.4, 0.5),
        SampleKey("zero-layer", ITL, stratum(DEFAULT_SEGMENT)): (0.02,),
        SampleKey("baseline", TTFT, TTFT_STRATUM): (0.3,),
    }
    found = per_variant({}, ("baseline", "zero-layer"), {}, samples)
    assert found["zero-layer"].ttft_values == {TTFT_STRATUM: (0.4, 0.5)}
    assert found["zero-layer"].itl_values == {stratum(DEFAULT_SEGMENT): (0.02,)}
    assert found["baseline"].itl_values == {}


def test_the_exact_tests_are_saved_with_the_rollout_and_read_back_the_same():
    import json

    from gateway.rollout.machine import initial_state
    from gateway.rollout.rollout_state import RolloutState

    rollout = spec()
    state = replace(initial_state(rollout, 0.0), evidence=run(rollout, slowdown=1.2, n_looks=60))
    assert state.evidence is not None
    assert state.evidence.tests["ttft_vs_baseline"].exact is not None
    assert RolloutState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
