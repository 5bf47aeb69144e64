"""The API table through the real Envoy and the real gateway, in front of graystack's own model servers
(both variants): the Responses API's conversation, embeddings, and what the table pins, refuses and
never serves, as the official `openai` SDK and a plain HTTP client see them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import families, names
from gateway.envoy.answer_log import FLUSH_S
from graystack.local.gateway_stack import GatewayStack
from tests.support.model_server import ModelServer, start_model_server, variant_weights, wait_ready
from tests.support.stacks import running
from tests.support.third_party.stack import RunningServers

pytestmark = pytest.mark.integration

PINNED = {"X-Client-Type": "pinned"}  # the spec's rule: this segment goes to zero-layer only


def spec(servers: dict[str, ModelServer], **changes) -> dict:
    return {
        "name": "apis",
        "variants": {name: {"endpoints": [f"127.0.0.1:{s.port}"]} for name, s in servers.items()},
        "routing": {
            "header": "X-Client-Type",
            "rules": [{"value": "pinned", "variant": "zero-layer"}],
            "weights": {"baseline": 50, "zero-layer": 50},
        },
        "timeouts": {"request": "60s"},
        "retries": {"on": "connect-failure", "attempts": 1},
        "health_check": {"interval": "1s"},
        **changes,
    }


class ModelServerStack(GatewayStack):
    """Envoy and the gateway in front of servers that already run: a request is a valid chat request."""

    def request(self, headers: dict | None = None) -> httpx.Response:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        return self.client.post("/v1/chat/completions", json=body, headers=headers)


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, ModelServer]]:
    workdir = tmp_path_factory.mktemp("apis-servers")
    weights = variant_weights(workdir / "weights", erased=())
    started = {v: start_model_server(v, v, weights[v], workdir / "logs") for v in ("baseline", "zero-layer")}
    try:
        for server in started.values():
            wait_ready(server)
        yield started
    finally:
        for server in started.values():
            server.process.stop()
            assert not server.process.alive(), f"{server.process.name} left running"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, envoy_binary, servers) -> Iterator[GatewayStack]:
    upstreams = RunningServers(spec(servers), ())
    workdir = tmp_path_factory.mktemp("apis-stack")
    yield from running(ModelServerStack(workdir, envoy_binary, upstreams=upstreams))


@pytest.fixture
def table(stack, servers):
    """`table(**changes)`: the spec with `changes` live on every proxy; the module's spec again after."""

    def apply(**changes) -> None:
        generation = stack.status()["generation"]
        stack.write_spec(spec(servers, **changes))
        stack.wait_converged(generation_above=generation)

    yield apply
    apply()


def sdk(stack: GatewayStack, headers: dict | None = None) -> openai.OpenAI:
    url = f"http://127.0.0.1:{stack.ports['listen']}/v1"
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60, default_headers=headers)


def raw(stack: GatewayStack, method: str, path: str, **kwargs) -> httpx.Response:
    """The path as sent, byte for byte (httpx would resolve `..` itself)."""
    url = httpx.URL(f"http://127.0.0.1:{stack.ports['listen']}").copy_with(raw_path=path.encode())
    return stack.client.request(method, url, **kwargs)


def gateway_sum(stack: GatewayStack, name: str, **labels: str) -> float:
    text = httpx.get(f"{stack.admin_url}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def answers_counted(stack: GatewayStack, api: str, **labels: str) -> float:
    """The answers of `api` the gateway measured (graystack_answers_total), with `labels` if given."""
    return gateway_sum(stack, families.ANSWERS, api=api, **labels)


def settled(stack: GatewayStack) -> None:
    """Until the earlier tests' answers have all arrived: no new entry over two of Envoy's flushes."""
    deadline = time.monotonic() + 15
    seen = -1.0
    while time.monotonic() < deadline:
        now = gateway_sum(stack, families.ANSWERS_RECEIVED)
        if now == seen:
            return
        seen = now
        time.sleep(2 * FLUSH_S + 0.5)


def wait_answers(stack: GatewayStack, api: str, at_least: float) -> float:
    """Until the gateway has measured `at_least` answers of `api` (the access log flushes each second)."""
    deadline = time.monotonic() + 15
    while (seen := answers_counted(stack, api)) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    return seen


def test_a_conversation_continues_on_the_variant_that_holds_it(stack):
    client = sdk(stack, PINNED).with_options()
    raw_first = client.responses.with_raw_response.create(
        model="tiny", input="Hello", max_output_tokens=4, temperature=0
    )
    first = raw_first.parse()
    follow = client.responses.create(
        model="tiny", input="And then?", previous_response_id=first.id, max_output_tokens=4, temperature=0
    )
    read = client.responses.retrieve(follow.id)
    assert raw_first.headers[names.VARIANT_HEADER] == "zero-layer"
    assert follow.previous_response_id == first.id
    assert follow.usage.input_tokens > first.usage.input_tokens  # the first turn and its answer came along
    assert (read.id, read.output_text) == (follow.id, follow.output_text)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_a_read_without_what_pins_the_conversation_may_reach_the_other_variant_and_get_404(stack):
    """What a client sees when nothing keeps its conversation on one variant: the split sends each read
    anywhere; the variant that never saw the response answers 404 in OpenAI's error shape."""
    created = sdk(stack, PINNED).responses.create(model="tiny", input="Hi", max_output_tokens=2)
    seen = set()
    for _ in range(40):
        response = stack.client.get(f"/v1/responses/{created.id}")
        variant = response.headers[names.VARIANT_HEADER]
        seen.add((variant, response.status_code))
        if response.status_code == 404:
            assert response.json()["error"]["message"].startswith("Response with id")
    assert seen <= {("zero-layer", 200), ("baseline", 404)}


def test_a_streamed_response_is_measured_as_complete(stack):
    """Its last event is `response.completed`, or `response.incomplete` when max_output_tokens cut it
    (the SDK's get_final_response takes only the former): either is the stream's end, not a cut."""
    before = answers_counted(stack, "responses")
    with sdk(stack).responses.stream(model="tiny", input="Count", max_output_tokens=8) as stream:
        events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert text == events[-1].response.output_text
    assert wait_answers(stack, "responses", before + 1) >= before + 1
    assert answers_counted(stack, "responses", ending="complete") >= 1
    assert answers_counted(stack, "responses", ending="cut") == 0
    assert answers_counted(stack, "responses", ending="error") == 0


def test_embeddings_reach_a_variant_and_are_measured_without_a_first_token(stack):
    settled(stack)
    before = answers_counted(stack, "embeddings")
    first_tokens = gateway_sum(stack, f"{families.GEN_AI_TTFT}_count")
    raw_answer = sdk(stack).embeddings.with_raw_response.create(model="tiny", input=["a cat", "a dog"])
    result = raw_answer.parse()
    assert raw_answer.headers[names.VARIANT_HEADER] in ("baseline", "zero-layer")
    assert [len(item.embedding) for item in result.data] == [len(result.data[0].embedding)] * 2
    assert result.usage.prompt_tokens == 12
    assert wait_answers(stack, "embeddings", before + 1) >= before + 1
    assert answers_counted(stack, "embeddings", ending="complete") >= 1
    assert (
        gateway_sum(stack, f"{families.GEN_AI_TTFT}_count") == first_tokens
    )  # an embedding has no first token


def test_a_path_not_in_the_table_is_refused_by_default_and_passed_to_the_baseline_when_configured(
    stack, table
):
    refused = stack.client.get("/v1/models/graystack-tiny")
    assert refused.status_code == 404
    assert refused.json()["error"]["message"].startswith("no route for GET /v1/models/graystack-tiny")
    assert names.VARIANT_HEADER not in refused.headers
    table(apis={"unknown_paths": "baseline"})
    passed = stack.client.get("/v1/models/graystack-tiny", headers=PINNED)
    assert passed.status_code == 200
    assert passed.headers[names.VARIANT_HEADER] == "baseline"
    assert passed.json()["object"] == "model"


@pytest.mark.parametrize("unknown_paths", ["refuse", "baseline"])
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/metrics"), ("GET", "/readyz"), ("GET", "/admin/outputs/x"), ("GET", "/v1/../metrics")],
)
def test_the_servers_metrics_admin_and_health_routes_are_never_reachable(
    stack, table, unknown_paths, method, path
):
    table(apis={"unknown_paths": unknown_paths})
    response = raw(stack, method, path)
    assert response.status_code == 404
    assert "graystack_requests_total" not in response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_table_entry_pinned_to_the_baseline_and_one_refused(stack, table):
    table(
        apis={
            "routes": {
                "POST /v1/embeddings": {"treatment": "baseline"},
                "POST /v1/responses": {"treatment": "refuse"},
            }
        }
    )
    client = sdk(stack, PINNED)
    for _ in range(5):
        pinned = client.embeddings.with_raw_response.create(model="tiny", input="x")
        assert pinned.headers[names.VARIANT_HEADER] == "baseline"  # though the header rule says zero-layer
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model="tiny", input="Hi")
    assert "POST /v1/responses is not served by this gateway" in str(refused.value)
    assert client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    ).choices
