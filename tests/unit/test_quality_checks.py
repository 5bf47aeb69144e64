"""Answer quality judged at the gateway (issue 28): greedy shadow pairs compared for any server, and the
captured answers' form tested against the baseline's, as sequential tests in the rollout's budget."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from bench.shipped_rules import seed_spec
from gateway.answers.answer import Answer
from gateway.answers.entries import answer_from
from gateway.answers.store import AnswerStore
from gateway.metrics.answered import WithAnswers
from gateway.metrics.observations import (
    COMPARED,
    CUT,
    DIFFERED,
    MALFORMED,
    STRUCTURED,
    CounterKey,
    Observations,
)
from gateway.quality.counts import QUALITY_SOURCE, QualityCounts
from gateway.rollout import evidence as tests
from gateway.rollout.analysis import Check, Verdict, analyse
from gateway.rollout.checks.agreement import SHADOW_AGREEMENT, AgreementSettings
from gateway.rollout.checks.base import Moment
from gateway.rollout.checks.judge import JUDGE, JudgeSettings
from gateway.rollout.checks.structure import STRUCTURE, StructureSettings
from gateway.rollout.increments import VariantLook
from gateway.rollout.plan import plan_for
from gateway.spec.model import validate_spec
from tests.unit.test_answers import STREAM, entry
from tests.unit.test_answers_into_errors import Fixed

BASE = answer_from(entry(STREAM))


def captured(variant: str, request_id: str, text: str, shadow: bool = False, **changes: object) -> Answer:
    assert BASE is not None
    fields = {"variant": variant, "answered_by": variant, "request_id": request_id, "captured": True}
    return replace(BASE, **{**fields, "text": text, "shadow": shadow, "temperature": 0.0, **changes})  # type: ignore[arg-type]


def pair(request_id: str, baseline: str, candidate: str, **changes: object) -> list[Answer]:
    return [
        captured("baseline", request_id, baseline, **changes),
        captured("zero-layer", request_id, candidate, shadow=True, **changes),
    ]


def counts(found: dict[CounterKey, float]) -> dict[tuple[str, str, str], float]:
    return {(k.variant, k.signal, k.stratum): v for k, v in found.items() if k.source == QUALITY_SOURCE}


def test_greedy_pairs_are_compared_and_others_are_not():
    quality = QualityCounts()
    answers = [
        *pair("r1", "Paris", "Paris"),
        *pair("r2", "Paris", "Lyon"),
        *pair("r3", "Paris", "Lyon", temperature=0.7),  # sampled: answers may differ, nothing to compare
        *pair("r4", "Paris", "Lyon", temperature=None),  # no temperature given: the API's default samples
        *pair(
            "r5", "Paris", "", ending="cut", status=200
        ),  # the copy's stream was cut: an error, not an answer
        # a copy of the candidate's own request (a Gateway API mirror filter copies a rule's every one)
        captured("zero-layer", "r6", "Lyon"),
        captured("zero-layer", "r6", "Paris", shadow=True),
    ]
    found = counts(quality.add(answers, [], now=0.0))
    assert found[("zero-layer", COMPARED, "")] == 2
    assert found[("zero-layer", DIFFERED, "")] == 1


def test_the_form_of_the_answers_counted_is_checked_per_variant_and_segment():
    quality = QualityCounts()
    observed = [
        captured("baseline", "a", '{"ok": 1}', response_format="json_object"),
        captured("zero-layer", "b", '{"ok": ', response_format="json_object"),
        captured("zero-layer", "c", "", segment="mobile"),
        captured("baseline", "f", "Paris is the", finish="length"),  # cut: shown, not malformed
        captured("zero-layer", "d", "fine", status=503),  # failed: the error tests' to count
        replace(captured("zero-layer", "e", "fine"), captured=False),
    ]
    found = counts(quality.add([], observed, now=0.0))
    assert found == {
        ("baseline", STRUCTURED, "mobile"): 2,
        ("baseline", MALFORMED, "mobile"): 0,
        ("baseline", CUT, "mobile"): 1,
        ("zero-layer", STRUCTURED, "mobile"): 2,
        ("zero-layer", MALFORMED, "mobile"): 2,
        ("zero-layer", CUT, "mobile"): 0,
    }


async def test_with_quality_the_gateways_comparisons_replace_the_servers_own():
    servers = {CounterKey("zero-layer", COMPARED, source="pod"): 900.0}
    store = AnswerStore()
    measured = WithAnswers(Fixed(Observations(counters=servers)), store, quality=QualityCounts())
    for answer in pair("r1", "Paris", "Lyon"):
        store.add(answer, now=1.0)
    seen = await measured.observe()
    assert CounterKey("zero-layer", COMPARED, source="pod") not in seen.counters
    assert counts(dict(seen.counters))[("zero-layer", DIFFERED, "")] == 1


def spec(quality: dict | None) -> dict:
    return seed_spec(analysis={"quality": quality} if quality is not None else {})


def test_each_comparator_is_a_test_in_the_budget_and_without_quality_the_plan_is_as_before():
    before = plan_for(validate_spec(spec(None)))
    plan = plan_for(validate_spec(spec({"structure": True, "max_greedy_disagreement": 0.01})))
    assert {SHADOW_AGREEMENT, STRUCTURE} <= set(plan.tests)
    assert STRUCTURE not in before.tests
    assert plan.alpha == before.alpha * len(before.tests) / len(plan.tests)
    assert plan.settings[SHADOW_AGREEMENT] == AgreementSettings(0.01)
    assert plan.settings[STRUCTURE] == StructureSettings(2.0, live=False)
    assert before.key == plan_for(validate_spec(spec(None))).key != plan.key


def structure_look(malformed: int) -> dict[str, VariantLook]:
    return {
        "zero-layer": VariantLook(requests=200, structure={"default": (200, malformed, 150)}),
        "baseline": VariantLook(requests=200, structure={"default": (200, 2, 150)}),
    }


def test_a_candidate_whose_answers_stop_parsing_fails_structure_and_an_equal_one_passes():
    plan = plan_for(validate_spec(spec({"structure": True, "capture_percent": 5})))
    for malformed, verdict in ((2, Verdict.PASS), (30, Verdict.FAIL)):
        evidence = tests.start(plan, "5%", 0.0)
        for _ in range(5):
            evidence = tests.add_look(evidence, plan, structure_look(malformed), "5%")
        (check,) = [c for c in analyse(plan, evidence, Moment()) if c.name == STRUCTURE]
        assert check.verdict == verdict, check.reason
        assert f"{5 * malformed} of 1000 candidate answers malformed" in check.reason
        assert (
            "cut at the token limit: 750 of 1000 against 750 of 1000 (length_cut tests them, with max_cut_ratio)"
            in check.reason
        )


def test_structure_runs_live_only_where_live_answers_are_captured():
    for capture, live in ((0, False), (10, True)):
        plan = plan_for(validate_spec(spec({"structure": True, "capture_percent": capture})))
        evidence = tests.start(plan, "5%", 0.0)
        names = [c.name for c in analyse(plan, evidence, Moment())]
        shadow = [c for c in analyse(plan, evidence, Moment(shadowing=True))]
        assert (STRUCTURE in names) == live
        (held,) = [c for c in shadow if c.name == STRUCTURE]
        assert held.verdict == Verdict.INCONCLUSIVE  # nothing compared yet: a hold, never a pass


def test_shadow_pairs_go_to_the_judge_in_the_background_and_its_verdicts_are_counted():
    from gateway.metrics.observations import JUDGED, LOST, TIED
    from gateway.quality.judge import Budget, Judge
    from gateway.quality.judging import Judging
    from tests.support.threaded_server import served
    from tests.unit.test_judge import judge_app

    async def run(port: int) -> dict:
        judging = Judging(Judge(f"http://127.0.0.1:{port}/v1", "judge", Budget(100), timeout=5.0))
        quality = QualityCounts(judging)
        answers = [
            *pair("r1", "good: Paris", "Lyon"),  # the judge prefers the answer that says good
            *pair("r2", "good: Paris", "Lyon", temperature=0.9),  # sampled answers are judged too
            *pair("r3", "Paris", "good: Paris"),
            *pair("r4", "Paris", "Paris"),
        ]
        quality.add(answers, [], now=0.0)  # returns at once: the verdicts come later
        await asyncio.gather(*list(judging._tasks))  # the verdicts in flight
        found = counts(quality.add([], [], now=1.0))
        return found

    with served(judge_app({"mode": "fair"}), "the judge") as port:
        found = asyncio.run(run(port))
    assert (found[("zero-layer", JUDGED, "")], found[("zero-layer", LOST, "")]) == (3, 2)
    assert found[("zero-layer", TIED, "")] == 1


def judge_spec(**judge: object) -> dict:
    return spec({"judge": {"url": "http://judge:8000/v1", "model": "judge", **judge}})


def test_the_judge_is_a_test_in_the_budget_whose_endpoint_can_move():
    plan = plan_for(validate_spec(judge_spec()))
    assert JUDGE in plan.tests
    assert plan.settings[JUDGE] == JudgeSettings(0.55)
    assert plan_for(validate_spec(judge_spec(url="http://other:9000/v1"))).key == plan.key
    assert plan_for(validate_spec(judge_spec(max_loss=0.6))).key != plan.key


def judge_after(decisive: int, lost: int, tied: int) -> Check:
    plan = plan_for(validate_spec(judge_spec()))
    evidence = tests.start(plan, "shadow", 0.0)
    look = {"zero-layer": VariantLook(judged=decisive, lost=lost, tied=tied)}
    evidence = tests.add_look(evidence, plan, look, "shadow")
    checks = analyse(plan, evidence, Moment(shadowing=True, judge_problem="HTTP 503"))
    (check,) = [c for c in checks if c.name == JUDGE]
    return check


def test_the_judge_check_fails_on_losses_holds_without_verdicts_and_passes_on_ties():
    assert judge_after(60, 50, 0).verdict == Verdict.FAIL
    held = judge_after(3, 1, 2)
    assert held.verdict == Verdict.INCONCLUSIVE
    assert "5 of the 20 verdicts a pass needs; the judge's last call: HTTP 503" in held.reason
    assert judge_after(0, 0, 25).verdict == Verdict.PASS  # identical answers: ties, no loss
    assert judge_after(30, 15, 0).verdict == Verdict.PASS


def test_keep_digest_keeps_no_answer_text_and_greedy_pairs_still_compare():
    from gateway.answers.capture import digested

    kept = [digested(answer) for answer in (*pair("r1", "Paris", "Paris"), *pair("r2", "Paris", "Lyon"))]
    assert all(len(answer.text or "") == 64 and "Paris" not in (answer.text or "") for answer in kept)
    found = counts(QualityCounts().add(kept, [], now=0.0))
    assert (found[("zero-layer", COMPARED, "")], found[("zero-layer", DIFFERED, "")]) == (2, 1)


def test_keep_digest_is_refused_with_a_check_that_reads_the_text():
    import pytest

    from gateway.spec.model import SpecError

    validate_spec(spec({"keep": "digest", "max_greedy_disagreement": 0.02}))
    for needs in ({"structure": True}, {"judge": {"url": "http://judge:8000/v1", "model": "judge"}}):
        with pytest.raises(SpecError, match="keep: digest keeps no text"):
            validate_spec(spec({"keep": "digest", **needs}))


def test_the_receiver_keeps_digests_where_the_spec_says_so():
    from gateway.answers.receiver import AnswerReceiver

    logged = entry({**STREAM, "capture": {"text": "Paris is lovely"}})
    for digests_only, expected in ((False, "Paris is lovely"), (True, None)):
        store = AnswerStore()
        AnswerReceiver(store, digests_only=lambda digests_only=digests_only: digests_only).take(logged)
        (kept,) = store.since(0).answers
        assert kept.captured
        assert (kept.text == "Paris is lovely") == (expected is not None)
        assert digests_only == (len(kept.text or "") == 64)


def test_a_replaced_provider_stops_its_judge_and_no_late_verdict_counts():
    """The guard rebuilds its provider when the spec's quality section changes: the old one's calls to the
    judge (a real, slow one: 2 s a verdict) are cancelled, not left running for a provider that is gone."""
    from gateway.answers.store import AnswerStore
    from gateway.metrics.answered import WithAnswers
    from gateway.quality.judge import Budget, Judge
    from gateway.quality.judging import Judging
    from gateway.rollout.guard import Guard
    from tests.support.counting_provider import CountingProvider
    from tests.support.threaded_server import served
    from tests.unit.test_judge import judge_app

    async def run(port: int) -> None:
        made: list[Judging] = []

        def provider(rollout):
            made.append(Judging(Judge(f"http://127.0.0.1:{port}/v1", "judge", Budget(100), timeout=5.0)))
            return WithAnswers(CountingProvider(), AnswerStore(), quality=QualityCounts(made[-1]))

        guard = Guard(provider)
        first = guard.provider_for(validate_spec(judge_spec()))
        assert isinstance(first, WithAnswers)
        assert first.quality is not None
        first.quality.add([*pair("r1", "good: Paris", "Lyon"), *pair("r2", "Paris", "good")], [], now=0.0)
        in_flight = list(made[0]._tasks)
        guard.provider_for(validate_spec(judge_spec(max_loss=0.6)))  # another quality section: rebuilt
        await asyncio.gather(*in_flight, return_exceptions=True)
        assert len(in_flight) == 2
        assert all(task.cancelled() for task in in_flight)
        assert not made[0].preferences  # nothing the gone provider would count
        guard.provider_for(validate_spec(judge_spec(max_loss=0.6)))  # the same spec: kept
        assert len(made) == 2

    with served(judge_app({"mode": "slow"}), "the judge") as port:
        asyncio.run(run(port))
