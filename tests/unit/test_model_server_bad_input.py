"""Bad input never crashes the model server: every kind gets a 4xx in the endpoint's error format, and
the next valid request is served.

Property-based (hypothesis) against the app in process, for both wire formats. The TestClient re-raises
any exception the app lets escape, so a crash fails the test rather than hiding as a 500.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference.server.app import create_app
from inference.server.body import MAX_BODY_BYTES
from tests.support.inference import TINY, tiny_model

EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
not_a_string = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.lists(json_scalars, max_size=3)
)
not_an_int = (
    st.none() | st.booleans() | st.text(max_size=5) | st.floats() | st.lists(json_scalars, max_size=3)
)
not_a_bool = st.none() | st.integers() | st.text(max_size=5) | st.lists(json_scalars, max_size=2)
not_a_number = st.none() | st.booleans() | st.text(max_size=5) | st.lists(json_scalars, max_size=2)


@dataclass(frozen=True)
class Api:
    path: str
    fields: tuple[str, ...]  # every field the endpoint accepts
    wrong_values: dict  # field -> strategy of values that field must refuse

    def valid(self, text: str = "hi", max_tokens: int = 1) -> dict:
        return {"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]}

    def assert_error_shape(self, body: dict) -> None:
        if self.path == "/v1/messages":
            assert body.keys() == {"type", "error"}
            assert body["type"] == "error"
            assert body["error"].keys() == {"type", "message"}
        else:
            assert body.keys() == {"error"}
            assert body["error"].keys() == {"message", "type", "param", "code"}
        assert isinstance(body["error"]["type"], str)
        assert isinstance(body["error"]["message"], str)
        assert body["error"]["message"]


text_block = st.fixed_dictionaries({"type": st.just("text"), "text": not_a_string})
bad_messages = (
    not_a_string.filter(lambda v: not isinstance(v, list))
    | st.lists(json_scalars, min_size=1, max_size=3)
    | st.builds(
        lambda role: [{"role": role, "content": "hi"}],
        st.text(max_size=10).filter(lambda r: r not in ("user", "assistant", "system", "developer")),
    )
    | st.builds(
        lambda content: [{"role": "user", "content": content}],
        st.none() | st.booleans() | st.integers() | st.lists(text_block, min_size=1, max_size=2),
    )
)
MESSAGES = Api(
    "/v1/messages",
    ("model", "max_tokens", "messages", "system", "stream", "temperature", "stop_sequences", "metadata"),
    {
        "model": not_a_string | st.just(""),
        "max_tokens": not_an_int,
        "messages": bad_messages,
        "system": st.booleans() | st.integers() | st.lists(st.integers(), min_size=1, max_size=2),
        "stream": not_a_bool,
        "temperature": not_a_number
        | st.floats(min_value=1.001, allow_infinity=False)
        | st.floats(max_value=-0.001),
        "stop_sequences": st.text(max_size=3) | st.lists(st.integers() | st.none(), min_size=1, max_size=3),
        "metadata": st.integers()
        | st.text(max_size=3)
        | st.builds(
            lambda hint: {"position_window_hint": hint}, st.integers(max_value=-1) | st.text(max_size=3)
        )
        | st.builds(
            lambda key: {key: 1},
            st.text(min_size=1, max_size=8).filter(lambda k: k not in ("user_id", "position_window_hint")),
        ),
    },
)
OPENAI = Api(
    "/v1/chat/completions",
    (
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "stop",
        "seed",
        "stream",
        "stream_options",
        "position_window_hint",
    ),
    {
        "model": not_a_string | st.just(""),
        "max_tokens": not_an_int.filter(lambda v: v is not None),
        "max_completion_tokens": not_an_int.filter(lambda v: v is not None),
        "messages": bad_messages,
        "temperature": not_a_number | st.floats(min_value=2.001, allow_infinity=False),
        "stop": st.integers() | st.booleans() | st.lists(st.integers(), min_size=1, max_size=2),
        "seed": not_an_int.filter(lambda v: v is not None)
        | st.integers(min_value=2**63)
        | st.integers(max_value=-(2**63) - 1),
        "stream": not_a_bool,
        "stream_options": st.integers() | st.builds(lambda v: {"include_usage": v}, not_a_bool),
        "position_window_hint": st.integers(max_value=-1) | st.text(max_size=3),
    },
)
APIS = [pytest.param(MESSAGES, id="messages"), pytest.param(OPENAI, id="openai")]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(tiny_model(tmp_path_factory.mktemp("weights"), "zero-layer"))
    with TestClient(app) as test_client:
        yield test_client


def refused(client: TestClient, api: Api, body: bytes | dict, status: int = 400) -> str:
    """Post `body`, expect `status` in the endpoint's error format, then a valid request served; the message."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post(api.path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    api.assert_error_shape(response.json())
    served = client.post(api.path, json=api.valid())
    assert served.status_code == 200, served.text
    return response.json()["error"]["message"]


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(body=json_values)
def test_random_json_is_refused(client, api, body):
    refused(client, api, body)


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(data=st.data())
def test_a_field_of_the_wrong_type_is_refused_by_name(client, api, data):
    field = data.draw(st.sampled_from(sorted(api.wrong_values)))
    value = data.draw(api.wrong_values[field])
    message = refused(client, api, {**api.valid(), field: value})
    assert message.startswith(field), message


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(messages=st.just([]) | st.just([{"role": "user", "content": []}]) | st.just([{"role": "user"}]))
def test_empty_messages_are_refused(client, api, messages):
    assert "messages" in refused(client, api, {**api.valid(), "messages": messages})


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(max_tokens=st.integers(max_value=0) | st.integers(min_value=TINY.max_seq_len + 1, max_value=10**30))
def test_max_tokens_out_of_range_is_refused(client, api, max_tokens):
    assert "max_tokens" in refused(client, api, {**api.valid(), "max_tokens": max_tokens})


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(field=st.text(min_size=1, max_size=12))
def test_an_unknown_field_is_refused_by_name(client, api, field):
    if field in api.fields:
        return
    assert field in refused(client, api, {**api.valid(), field: 1})


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(body=st.binary(min_size=1, max_size=64).filter(lambda b: not _is_utf8(b)))
def test_a_body_that_is_not_utf8_is_refused(client, api, body):
    assert "UTF-8" in refused(client, api, body)


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=5, deadline=None)
@given(excess=st.integers(min_value=1, max_value=4096))
def test_an_oversized_body_is_refused_with_413(client, api, excess):
    padding = b"a" * (MAX_BODY_BYTES + excess)
    refused(client, api, b'{"model": "' + padding + b'"}', status=413)


@pytest.mark.parametrize("api", APIS)
def test_an_oversized_body_without_a_length_is_refused_with_413(client, api):
    chunks = (b"a" * 65536 for _ in range(MAX_BODY_BYTES // 65536 + 1))
    response = client.post(api.path, content=chunks)
    assert response.status_code == 413
    api.assert_error_shape(response.json())


@pytest.mark.parametrize("api", APIS)
@EXAMPLES
@given(length=st.integers(min_value=TINY.max_seq_len, max_value=4 * TINY.max_seq_len))
def test_a_prompt_longer_than_the_context_is_refused(client, api, length):
    assert "prompt is too long" in refused(client, api, api.valid(text="x" * length))


@pytest.mark.parametrize("api", APIS)
def test_surrogates_and_deep_nesting_are_refused(client, api):
    refused(client, api, b'{"model": "\\ud800", "max_tokens": 1, "messages": []}')
    refused(client, api, b"[" * 100_000 + b"]" * 100_000)


short_text = st.text(min_size=1, max_size=40)
turns = st.lists(st.tuples(st.sampled_from(["user", "assistant"]), short_text), min_size=1, max_size=3)
blocks = st.lists(short_text.map(lambda text: {"type": "text", "text": text}), min_size=1, max_size=2)


@st.composite
def well_formed(draw, api: Api) -> dict:
    """Any request the endpoint's documented fields allow (small max_tokens, to stay fast)."""
    body = {"model": draw(short_text), "max_tokens": draw(st.integers(1, 3)), "stream": draw(st.booleans())}
    contents = [draw(short_text | blocks) for _ in range(3)]
    body["messages"] = [
        {"role": role, "content": content} for (role, _), content in zip(draw(turns), contents, strict=False)
    ]
    stops = st.lists(st.text(min_size=1, max_size=4), max_size=3)
    hint = st.integers(min_value=0, max_value=10**12)
    if api is MESSAGES:
        optional = {
            "system": short_text | blocks,
            "temperature": st.floats(0, 1),
            "stop_sequences": stops,
            "metadata": st.fixed_dictionaries(
                {}, optional={"user_id": short_text, "position_window_hint": hint}
            ),
        }
    else:
        optional = {
            "temperature": st.floats(0, 2),
            "stop": short_text | stops,
            "seed": st.integers(-(2**63), 2**63 - 1),
            "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
            "position_window_hint": hint,
        }
    for field, values in optional.items():
        if draw(st.booleans()):
            body[field] = draw(values)
    return body


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_well_formed_request_is_served(client, api, data):
    """A counterpart to the refusals: well-formed requests, however odd their values, get answers."""
    body = data.draw(well_formed(api))
    response = client.post(api.path, json=body)
    if response.status_code == 400:  # the only refusal allowed: multi-byte text past the tiny context
        assert response.json()["error"]["message"].startswith("prompt is too long"), response.text
        return
    assert response.status_code == 200, response.text
    if body["stream"]:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "error" not in response.text.split("\n\n")[-2]
    else:
        assert response.json()["usage"]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def test_a_client_that_leaves_mid_body_is_counted_apart_from_bad_input():
    """Envoy resets an attempt it gave up on: not the client's mistake (400), nor the server's (5xx)."""
    from starlette.requests import Request

    from inference.server.body import read_json_object
    from inference.server.errors import ApiError

    messages = iter([{"type": "http.request", "body": b'{"model": ', "more_body": True}])

    async def receive() -> dict:
        return next(messages, {"type": "http.disconnect"})

    scope = {"type": "http", "method": "POST", "path": "/v1/messages", "headers": []}
    with pytest.raises(ApiError) as error:
        await read_json_object(Request(scope, receive))
    assert error.value.status == 499
    assert "went away" in error.value.message
