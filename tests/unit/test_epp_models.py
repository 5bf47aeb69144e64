"""Model variants (issue 37, item 3): the pure rewrite of a request body's `model`, the picker's ticket for
a model variant (the baseline's pods, the model name, sticky per cohort), and the spec's
`endpoint_picker.models` with what it refuses. On the real Envoy: tests/integration/test_epp_models.py."""

from __future__ import annotations

import json

import pytest

from gateway.epp.feed import pool_endpoints, wanted_from
from gateway.epp.picker import Picker
from gateway.epp.rewrite import read, rewrite_model
from gateway.epp.wanted import Wanted, parse_models
from gateway.errors import SpecError
from gateway.spec.model import validate_spec

BASELINE = ("10.0.0.1:8000", "10.0.0.2:8000")


def test_the_model_is_rewritten_and_the_rest_kept():
    sent = {"model": "llama-3", "messages": [{"role": "user", "content": "héllo 日本"}], "stream": True}
    document = read(json.dumps(sent).encode())
    assert isinstance(document, dict)
    rewritten = rewrite_model(document, "llama-3-lora-v2")
    assert isinstance(rewritten, bytes)
    assert json.loads(rewritten) == {**sent, "model": "llama-3-lora-v2"}
    assert "日本".encode() in rewritten  # UTF-8 kept as it was, not escaped


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"", "not JSON"),
        (b'["model"]', "not a JSON object"),
        (b'{"prompt": "hi"}', "no model"),
        (b'{"model": 3}', "no model"),
    ],
)
def test_a_body_that_cannot_be_rewritten_says_why(body, reason):
    document = read(body)
    assert (document if isinstance(document, str) else rewrite_model(document, "x")) == reason


def wanted(weights: dict[str, int], **kw: object) -> Wanted:
    return Wanted(
        pods={"baseline": BASELINE},
        weights=weights,
        baseline="baseline",
        models={"canary": "lora-v2"},
        **kw,  # type: ignore[arg-type]
    )


def test_a_model_variant_is_picked_on_the_baselines_pods_with_its_model_name():
    picker = Picker(lambda: wanted({"canary": 100}))
    ticket = picker.pick({}, None)
    assert ticket is not None
    assert (ticket.variant, ticket.model, ticket.baseline) == ("canary", "lora-v2", "baseline")
    assert set(ticket.endpoints) == set(BASELINE)
    picker.unchanged(ticket)  # its body could not be rewritten: it counts as the baseline's
    assert (ticket.variant, ticket.model) == ("baseline", None)
    baseline = Picker(lambda: wanted({"baseline": 100})).pick({}, None)
    assert baseline is not None
    assert baseline.model is None


def test_a_cohort_keeps_one_model_and_the_subset_hint_applies():
    picker = Picker(lambda: wanted({"baseline": 50, "canary": 50}, cohort_header="x-user"))
    models = {}
    for user in range(40):
        seen = set()
        for _ in range(5):
            ticket = picker.pick({"x-user": f"u{user}"}, None)
            assert ticket is not None
            seen.add(ticket.model)
            picker.release(ticket)
        assert len(seen) == 1
        models[user] = seen.pop()
    assert set(models.values()) == {None, "lora-v2"}
    assert Picker(lambda: wanted({"canary": 100})).pick({}, frozenset({"10.9.9.9:1"})) is None


def test_an_answer_on_the_baselines_pods_counts_as_the_model_variant_its_request_was_marked_with():
    fed = Wanted(
        pods={"baseline": BASELINE, "green": ("10.0.0.7:8000",)},
        weights={"baseline": 1},
        baseline="baseline",
        models={"canary": "lora-v2"},
    )
    assert fed.answered_as(BASELINE[1], "canary") == "canary"
    assert fed.answered_as(BASELINE[1], None) == "baseline"
    assert fed.answered_as(BASELINE[1], "unknown") == "baseline"
    # a variant of pods is proven by where it was served: a mark never moves an answer onto or off it
    assert fed.answered_as(BASELINE[1], "green") == "baseline"
    assert fed.answered_as("10.0.0.7:8000", "canary") == "green"
    assert fed.answered_as("", "canary") is None  # no pod served it (a refusal)


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"models": {"baseline": "x"}}, "cannot be one"),
        ({"models": {"canary": ""}}, "empty"),
        ({"weights": {"other": 1}}, "no pods"),
    ],
)
def test_wanted_refuses_a_model_variant_it_cannot_serve(kw, named):
    with pytest.raises(ValueError, match=named):
        Wanted(**{"pods": {"baseline": BASELINE}, "weights": {"baseline": 1}, "baseline": "baseline", **kw})


def test_models_flags_parse():
    assert parse_models(["canary=llama-3-lora-v2", "b=x"]) == {"canary": "llama-3-lora-v2", "b": "x"}
    with pytest.raises(ValueError, match="model"):
        parse_models(["canary"])


def spec(picker: dict) -> object:
    return validate_spec(
        {
            "name": "llm",
            "variants": {"stable": {"service": "a", "port": 1}, "canary": {"service": "b", "port": 1}},
            "routing": {"weights": {"stable": 80, "canary": 20}, "affinity": [{"header": "x-user"}]},
            "retries": {"fallback": "stable"},
            "endpoint_picker": {"pool": "llm", "variant_label": "track", **picker},
        }
    )


def test_the_spec_feeds_a_model_variant_on_the_baselines_pods():
    live = spec({"values": {"stable": "v1"}, "models": {"canary": "llama-3-lora-v2"}})
    pool = {"spec": {"selector": {"matchLabels": {}}, "targetPorts": [{"number": 8000}]}}
    ready = {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}
    pods = [
        {"metadata": {"labels": {"track": "v1"}}, "status": ready},
        {"metadata": {"labels": {"track": "canary"}}, "status": {**ready, "podIP": "10.0.0.9"}},
    ]
    found = pool_endpoints(pool, pods, live.endpoint_picker, live.variants)  # type: ignore[attr-defined]
    assert found == {"stable": ("10.0.0.1:8000",)}  # a pod labelled with the model variant's name: not its
    fed = wanted_from(live, found, "stable")  # type: ignore[arg-type]
    assert dict(fed.models) == {"canary": "llama-3-lora-v2"}
    assert fed.pods_of("canary") == ("10.0.0.1:8000",)


@pytest.mark.parametrize(
    ("picker", "named"),
    [
        (
            {"models": {"canary": "m"}, "values": {"canary": "v2"}},
            "endpoint_picker.models: ['canary'] also given a label value",
        ),
        ({"models": {"canary": " "}}, "endpoint_picker.models: an empty model name"),
        ({"models": {"other": "m"}}, "endpoint_picker.models: unknown variant"),
        ({"models": {"stable": "m"}}, "endpoint_picker.models: the baseline 'stable'"),
    ],
)
def test_the_spec_refuses_a_model_variant_naming_the_field(picker, named):
    with pytest.raises(SpecError) as refused:
        spec(picker)
    assert named in str(refused.value)
