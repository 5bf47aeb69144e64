"""Clients as the tests' unit once cohorts assign them (gateway/metrics/client_units.py): each client's
first answer on a variant is its one observation, unkeyed answers all count, and the error tests read
those counts in place of Envoy's."""

from __future__ import annotations

from dataclasses import replace

from bench.shipped_rules import seed_spec
from gateway.answers.answer import Answer
from gateway.answers.entries import answer_from, client_digest
from gateway.answers.store import AnswerStore
from gateway.metrics.answered import UNITS_SOURCE, WithAnswers
from gateway.metrics.client_units import ClientUnits
from gateway.metrics.observations import REQUESTS, TTFT, UNIT_ERRORS, UNITS, CounterKey, Observations
from gateway.names import AFFINITY_HEADER
from gateway.rollout import evidence as tests
from gateway.rollout.increments import VariantLook
from gateway.rollout.plan import plan_for
from gateway.spec.model import validate_spec
from tests.unit.test_answers import STREAM, entry
from tests.unit.test_answers_into_errors import Fixed


def answer(variant: str = "zero-layer", client: int | None = None, **changes: object) -> Answer:
    made = answer_from(entry(STREAM, cluster=variant))
    assert made is not None
    return replace(made, **{"answered_by": variant, "client": client, **changes})  # type: ignore[arg-type]


def test_the_answer_carries_a_digest_of_the_key_the_affinity_filter_wrote_never_the_key():
    logged = entry(STREAM)
    logged.request.request_headers[AFFINITY_HEADER] = "user-42"
    keyed, unkeyed = answer_from(logged), answer_from(entry(STREAM))
    assert keyed is not None
    assert unkeyed is not None
    assert keyed.client == client_digest("user-42") != client_digest("user-43")
    assert "user-42" not in repr(keyed)
    assert unkeyed.client is None


def test_each_client_counts_once_per_variant_and_unkeyed_answers_all_count():
    units = ClientUnits()
    looks = [
        [answer(client=1), answer(client=1), answer(client=2), answer(), answer()],
        [answer(client=1), answer(client=3), answer("baseline", client=1), answer()],
    ]
    kept = [units.take(look) for look in looks]
    assert [[a.client for a in look] for look in kept] == [[1, 2, None, None], [3, 1, None]]
    assert kept[1][1].variant == "baseline"  # a client that moved variant counts once on each
    units.restart()
    assert [a.client for a in units.take([answer(client=1)])] == [1]  # new tests: a new count


def test_past_its_limit_a_client_is_left_out_never_counted_twice():
    units = ClientUnits(limit=2)
    kept = units.take([answer(client=c) for c in (1, 2, 3, 1, 3)])
    assert [a.client for a in kept] == [1, 2]
    assert units.overflow == 2


async def test_with_cohorts_the_look_reports_each_client_once_beside_envoys_counters():
    envoy = {CounterKey("zero-layer", REQUESTS, source="envoy"): 500.0}
    store = AnswerStore()
    measured = WithAnswers(Fixed(Observations(counters=envoy)), store, clients=True)
    heavy_bot = [answer(client=7, status=503) for _ in range(40)]  # one client failing all its requests
    for one in (
        *heavy_bot,
        answer(client=8),
        answer(client=8),
        answer(),
        answer(client=9, answered_by="baseline"),
    ):
        store.add(one, now=1.0)
    seen = await measured.observe()
    assert seen.counters[CounterKey("zero-layer", REQUESTS, source="envoy")] == 500.0  # kept, for load
    units = {key: value for key, value in seen.counters.items() if key.source == UNITS_SOURCE}
    assert units == {
        CounterKey("zero-layer", UNITS, source=UNITS_SOURCE): 4.0,  # clients 7, 8, 9 and one unkeyed
        CounterKey("zero-layer", UNIT_ERRORS, source=UNITS_SOURCE): 2.0,  # 7's first; 9 fell back
    }
    ttft = [value for key, values in seen.samples.items() if key.signal == TTFT for value in values]
    assert len(ttft) == 2  # client 8's first answer and the unkeyed one: failed ones have no time
    store.add(answer(client=8), now=2.0)
    measured.new_count()
    again = await measured.observe()
    assert again.counters[CounterKey("zero-layer", UNITS, source=UNITS_SOURCE)] == 5.0  # 8 counted anew


async def test_without_cohorts_no_unit_series_is_reported():
    store = AnswerStore()
    store.add(answer(client=7), now=1.0)
    seen = await WithAnswers(Fixed(Observations()), store).observe()
    assert not [key for key in seen.counters if key.signal in (UNITS, UNIT_ERRORS)]


def spec(affinity: list | None = None) -> dict:
    routing = {"weights": {"baseline": 95, "zero-layer": 5}, **({"affinity": affinity} if affinity else {})}
    return seed_spec(routing=routing)


def test_with_cohorts_the_error_tests_count_clients_and_start_anew_when_cohorts_are_turned_on():
    plain, cohorts = plan_for(validate_spec(spec())), plan_for(validate_spec(spec([{"header": "x-user-id"}])))
    assert (plain.client_units, cohorts.client_units) == (False, True)
    assert plain.key != cohorts.key
    look = {
        "zero-layer": VariantLook(requests=400, errors=40, units=10, unit_errors=1),
        "baseline": VariantLook(requests=8000, errors=8, units=200, unit_errors=0),
    }
    for plan, counted in ((plain, (400, 40, 8000)), (cohorts, (10, 1, 200))):
        evidence = tests.add_look(tests.start(plan, "5%", 0.0), plan, look, "5%")
        got = (
            evidence.tests["error_rate"].candidate.requests,
            evidence.tests["error_rate"].candidate.events,
            evidence.tests["error_rate"].baseline.requests,
        )
        assert got == counted
        assert evidence.stage.requests == counted[0]
        assert evidence.tests["error_ratio"].test.candidate_requests == counted[0]
