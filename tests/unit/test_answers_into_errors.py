"""The answers that failed after their status count as errors in the rollout's looks
(gateway/metrics/answered.py): per variant that answered, cumulative, beside Envoy's counters."""

from __future__ import annotations

from gateway.answers.entries import answer_from
from gateway.answers.store import AnswerStore
from gateway.metrics.answered import ANSWERS_SOURCE, WithAnswers
from gateway.metrics.observations import ERRORS, REQUESTS, CounterKey, Observations
from tests.unit.test_answers import STREAM, entry

ENVOY = {
    CounterKey("baseline", REQUESTS, source="envoy"): 100.0,
    CounterKey("baseline", ERRORS, source="envoy"): 1.0,
}


class Fixed:
    def __init__(self, seen: Observations) -> None:
        self.seen = seen

    def new_count(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def observe(self) -> Observations:
        return self.seen


def store_with(*ends: tuple[dict | None, int, dict]) -> AnswerStore:
    store = AnswerStore()
    for end, status, flags in ends:
        answer = answer_from(entry(end, status=status, **flags))
        assert answer is not None
        store.add(answer, now=1.0)
    return store


async def test_streams_that_failed_after_200_add_an_errors_series_and_nothing_else_does():
    store = store_with(
        ({**STREAM, "final": False}, 200, {}),  # cut before its final event
        ({**STREAM, "error": "overloaded_error"}, 200, {}),  # an error event after 200
        (STREAM, 200, {}),  # whole
        ({"sse": False, "content": 0}, 503, {}),  # a 5xx: Envoy counts it already
        (None, 200, {"downstream_connection_termination": True}),  # the client left: not the server's
    )
    seen = await WithAnswers(Fixed(Observations(counters=ENVOY)), store).observe()
    errors = {key: value for key, value in seen.counters.items() if key.signal in (ERRORS, REQUESTS)}
    assert errors == {**ENVOY, CounterKey("baseline", ERRORS, source=ANSWERS_SOURCE): 2.0}


async def test_a_look_that_failed_stays_failed():
    store = store_with(({**STREAM, "final": False}, 200, {}))
    failed = Observations(error="envoy admin unreachable")
    assert await WithAnswers(Fixed(failed), store).observe() == failed


def test_each_answer_received_is_exported_under_the_genai_names():
    from prometheus_client import REGISTRY

    from gateway.answers.receiver import AnswerReceiver

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    where = {"variant": "baseline", "segment": "mobile"}
    before = (
        sample("gen_ai_server_time_to_first_token_seconds_count", **where, prompt_bucket="129-512"),
        sample("gen_ai_client_token_usage_sum", **where, gen_ai_token_type="output"),
        sample("graystack_answers_total", **where, api="chat", ending="cut", finish="stop"),
    )
    AnswerReceiver(AnswerStore()).take(entry({**STREAM, "final": False, "output": 12}))
    after = (
        sample("gen_ai_server_time_to_first_token_seconds_count", **where, prompt_bucket="129-512"),
        sample("gen_ai_client_token_usage_sum", **where, gen_ai_token_type="output"),
        sample("graystack_answers_total", **where, api="chat", ending="cut", finish="stop"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1.0, 12.0, 1.0]


async def test_measured_output_tokens_replace_the_servers_own_count_for_a_variant_that_has_them():
    from gateway.metrics.answered import TOKENS_SOURCE
    from gateway.metrics.observations import GENERATED

    servers = {
        CounterKey("baseline", GENERATED, source="pod-a tokens"): 500.0,
        CounterKey("zero-layer", GENERATED, source="pod-b tokens"): 70.0,  # no answer measured for it yet
    }
    store = store_with(({**STREAM, "output": 12}, 200, {}), ({**STREAM, "output": 30}, 200, {}))
    seen = await WithAnswers(Fixed(Observations(counters=servers)), store).observe()
    assert seen.counters == {
        CounterKey("zero-layer", GENERATED, source="pod-b tokens"): 70.0,
        CounterKey("baseline", GENERATED, source=TOKENS_SOURCE): 42.0,
    }
