"""The API table's validation: the defaults, entries merged over them, and each bad entry refused with a
message naming it (gateway/spec/apis.py)."""

import pytest

from gateway.spec.apis import DEFAULT_ROUTES, path_regex
from gateway.spec.fields import SpecError
from gateway.spec.model import validate_spec
from tests.unit.test_spec import example


def table(**apis):
    return {e.key: (e.kind, e.treatment, e.checks) for e in validate_spec(example(apis=apis)).apis.table()}


def test_the_defaults_route_todays_apis_plus_responses_and_embeddings():
    assert table() == {
        "POST /v1/messages": ("anthropic_messages", "split", ("errors", "latency")),
        "POST /v1/messages/count_tokens": ("anthropic_count_tokens", "split", ("errors",)),
        "POST /v1/chat/completions": ("openai_chat", "split", ("errors", "latency")),
        "POST /v1/completions": ("openai_completions", "split", ("errors", "latency")),
        "POST /v1/responses": ("openai_responses", "split", ("errors", "latency")),
        "GET /v1/responses/{id}": ("openai_responses", "split", ("errors",)),
        "DELETE /v1/responses/{id}": ("openai_responses", "split", ("errors",)),
        "POST /v1/embeddings": ("openai_embeddings", "split", ("errors",)),
        "GET /v1/models": ("models", "baseline", ()),
    }
    assert validate_spec(example()).apis.unknown_paths == "refuse"


def test_entries_override_a_default_keeping_its_kind_and_add_new_apis():
    merged = table(
        routes={
            "POST /v1/embeddings": {"treatment": "baseline"},
            "POST /v1/completions": {"treatment": "refuse"},
            "POST /v1/chat/completions": {"checks": ["errors"]},
            "POST /v2/generate/{model}": {"kind": "other"},
        }
    )
    assert merged["POST /v1/embeddings"] == ("openai_embeddings", "baseline", ())
    assert merged["POST /v1/completions"] == ("openai_completions", "refuse", ())
    assert merged["POST /v1/chat/completions"] == ("openai_chat", "split", ("errors",))
    assert merged["POST /v2/generate/{model}"] == ("other", "split", ("errors", "latency"))
    assert list(merged)[-1] == "POST /v2/generate/{model}"  # after the defaults: an exact default wins
    assert len(merged) == len(DEFAULT_ROUTES) + 1


@pytest.mark.parametrize(
    ("apis", "message"),
    [
        ({"routes": {"FETCH /v1/x": {"kind": "other"}}}, "'FETCH /v1/x': start with a method"),
        ({"routes": {"POST v1/x": {"kind": "other"}}}, "'POST v1/x': the path must start with '/'"),
        ({"routes": {"POST /v1/x?y=1": {"kind": "other"}}}, "segment(s) ['x?y=1']"),
        ({"routes": {"POST /v1/{a-b}": {"kind": "other"}}}, "segment(s) ['{a-b}']"),
        ({"routes": {"POST /v1/new": {}}}, "'POST /v1/new': name its `kind`"),
        ({"routes": {"POST /v1/new": {"kind": "grpc"}}}, "apis.routes.POST /v1/new.kind"),
        ({"routes": {"GET /metrics": {"kind": "other"}}}, "own /metrics route"),
        ({"routes": {"POST /admin/faults": {"kind": "other"}}}, "own /admin route"),
        ({"routes": {"GET /{any}": {"kind": "other"}}}, "'GET /{any}' would reach the servers' own /metrics"),
        ({"routes": {"GET /healthz/{x}": {"kind": "other"}}}, "own /healthz route"),
        ({"routes": {"POST /v1/embeddings": {"checks": ["latency"]}}}, "always feeds the `errors` checks"),
        ({"routes": {"GET /v1/models": {"checks": ["errors"]}}}, "a baseline API feeds no checks"),
        (
            {"routes": {"POST /v1/x": {"kind": "other", "treatment": "pin"}}},
            "apis.routes.POST /v1/x.treatment",
        ),
        (
            {
                "routes": {
                    "GET /v1/responses/{response_id}": {"treatment": "refuse", "kind": "openai_responses"}
                }
            },
            "'GET /v1/responses/{response_id}' and 'GET /v1/responses/{id}' match the same requests",
        ),
        ({"unknown_paths": "pass"}, "apis.unknown_paths"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(apis, message):
    with pytest.raises(SpecError) as error:
        validate_spec(example(apis=apis))
    assert message in str(error.value)


def test_a_table_entry_on_a_health_check_path_is_refused():
    data = example(apis={"routes": {"GET /v1/ready": {"kind": "other"}}}, health_check={"path": "/v1/ready"})
    with pytest.raises(SpecError, match="'GET /v1/ready' would reach the health-check path /v1/ready"):
        validate_spec(data)


def test_a_spec_written_back_keeps_its_table():
    """The admin API and the CLI edit the spec by dumping and validating it again (with_split)."""
    spec = validate_spec(
        example(
            apis={"unknown_paths": "baseline", "routes": {"POST /v1/embeddings": {"treatment": "refuse"}}}
        )
    )
    flipped = spec.with_split({"baseline": 50, "zero-layer": 50})
    assert flipped.apis == spec.apis


@pytest.mark.parametrize(
    ("path", "regex"),
    [("/v1/responses/{id}", "^/v1/responses/[^/]+$"), ("/v1/chat.completions", r"^/v1/chat\.completions$")],
)
def test_a_templated_segment_is_one_segment_of_any_value(path, regex):
    assert path_regex(path) == regex
