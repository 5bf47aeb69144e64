"""Envoy's own answers reach the official SDKs as the API's typed errors, only the inference API is
routed, and health checks run on each server's own path or not at all: through the real Envoy,
programmed by the real gateway, in front of stand-in upstreams (one stack for the module).

The stand-ins answer 200 on /readyz and 404 on /health (a route they lack, as some servers lack any).
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from graystack.local.gateway_stack import GatewayStack
from graystack.local.processes import wait_until
from tests.support.stacks import envoy_stats, running, set_upstream, upstream_answers, variant_counts

GUARDED = "the model servers' own routes (metrics, admin, health) are not served through the gateway"
ZERO_LAYER = {"X-Client-Type": "high_load"}  # the default spec's rule: this segment goes to zero-layer
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, envoy_binary):
    yield from running(GatewayStack(tmp_path_factory.mktemp("replies"), envoy_binary))


@pytest.fixture
def default_spec(stack):
    """Each test starts from the stack's spec with both stand-ins healthy, and leaves it so."""
    original = stack.spec
    yield
    for variant in ("baseline", "zero-layer"):
        set_upstream(stack, variant, "ok")
    if stack.spec != original:
        apply(stack, original)


def apply(stack, spec: dict) -> None:
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def clients(stack) -> tuple[anthropic.Anthropic, openai.OpenAI]:
    url = f"http://127.0.0.1:{stack.ports['listen']}"
    return (
        anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30),
        openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30),
    )


def sdk_errors(stack, headers: dict) -> tuple[anthropic.APIStatusError, openai.APIStatusError]:
    """What each official SDK raises for one request of its API, sent with `headers`."""
    messages, chat = clients(stack)
    with pytest.raises(anthropic.APIStatusError) as from_anthropic:
        messages.messages.create(model="m", max_tokens=8, messages=MESSAGES, extra_headers=headers)
    with pytest.raises(openai.APIStatusError) as from_openai:
        chat.chat.completions.create(model="m", messages=MESSAGES, extra_headers=headers)
    return from_anthropic.value, from_openai.value


@pytest.mark.usefixtures("default_spec")
def test_a_timed_out_variant_is_each_sdks_typed_timeout_naming_the_variant(stack):
    """Both stand-ins stall past `first_byte` (1 s): zero-layer's attempt is cut, its retry on the
    baseline too, and Envoy answers 504 itself."""
    for variant in ("baseline", "zero-layer"):
        set_upstream(stack, variant, "stall", stall_seconds=3)
    from_anthropic, from_openai = sdk_errors(stack, ZERO_LAYER)

    assert isinstance(from_anthropic, anthropic.GatewayTimeoutError)
    assert from_anthropic.status_code == 504
    assert from_anthropic.response.headers["content-type"] == "application/json"
    assert from_anthropic.body == {
        "type": "error",
        "error": {"type": "timeout_error", "message": "upstream request timeout"},
    }
    # The split's choice, not the aggregate `zero-layer-with-fallback` cluster, nor the fallback retried.
    assert from_anthropic.response.headers["x-graystack-variant"] == "zero-layer"

    assert isinstance(from_openai, openai.InternalServerError)
    assert from_openai.status_code == 504
    assert (from_openai.type, from_openai.code) == ("server_error", "upstream_per_try_idle_timeout")
    assert from_openai.body["message"] == "upstream request timeout"
    assert from_openai.response.headers["x-graystack-variant"] == "zero-layer"


@pytest.mark.usefixtures("default_spec")
def test_a_server_that_does_not_name_itself_is_named_by_envoy_after_the_host_that_answered(stack):
    """Servers that are not graystack's send no `x-graystack-variant`: Envoy names the variant whose host
    answered, so a failed attempt retried on the fallback names the fallback."""
    set_upstream(stack, "baseline", "ok", anonymous=True)
    set_upstream(stack, "zero-layer", "ok", anonymous=True)
    assert variant_counts(stack, 3, ZERO_LAYER) == {"baseline": 0, "zero-layer": 3}
    set_upstream(stack, "zero-layer", "fail", anonymous=True)
    assert variant_counts(stack, 3, ZERO_LAYER) == {"baseline": 3, "zero-layer": 0}
    assert upstream_answers(stack, "zero-layer") == {"503": 3}  # each tried on zero-layer first


@pytest.mark.usefixtures("default_spec")
def test_health_checks_run_on_each_servers_path_or_not_at_all(stack):
    """Checked on /health, which the stand-ins lack: zero-layer has no healthy host, and with no fallback
    Envoy answers 503 itself; the baseline, unchecked, serves. Zero-layer's own path heals it."""
    spec = stack.spec
    spec["retries"] = {"on": "5xx,reset,connect-failure", "attempts": 1}
    spec["health_check"] = {"path": "/health", "interval": "1s", "unhealthy_threshold": 1}
    spec["variants"]["baseline"]["health_check"] = None
    apply(stack, spec)
    wait_until(lambda: stack.request(ZERO_LAYER).status_code == 503, 10, "zero-layer to fail /health")

    assert variant_counts(stack, 5) == {"baseline": 5, "zero-layer": 0}  # its /health is 404 too
    from_anthropic, from_openai = sdk_errors(stack, ZERO_LAYER)
    assert isinstance(from_anthropic, anthropic.ServiceUnavailableError)
    assert from_anthropic.body["error"] == {"type": "api_error", "message": "no healthy upstream"}
    assert from_anthropic.response.headers["x-graystack-variant"] == "zero-layer"
    assert isinstance(from_openai, openai.InternalServerError)
    assert (from_openai.status_code, from_openai.code) == (503, "no_healthy_upstream")
    assert from_openai.response.headers["x-graystack-variant"] == "zero-layer"

    spec["variants"]["zero-layer"]["health_check"] = {"path": "/readyz"}
    apply(stack, spec)
    wait_until(lambda: stack.request(ZERO_LAYER).status_code == 200, 10, "zero-layer to pass /readyz")
    assert variant_counts(stack, 5, ZERO_LAYER) == {"baseline": 0, "zero-layer": 5}


@pytest.mark.parametrize(
    "path",
    ["/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions", "/v1/completions?stream=false"],
)
def test_the_inference_api_is_routed(stack, path):
    response = stack.client.post(path, json={})
    assert response.status_code == 200
    assert response.headers["x-graystack-variant"] == "baseline"  # the default split, at baseline 100


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/metrics", GUARDED),
        ("/readyz", GUARDED),
        ("/healthz", GUARDED),
        ("/health", GUARDED),
        ("/admin/faults", GUARDED),
        ("//metrics", GUARDED),
        ("/v1/../metrics", GUARDED),
        ("/Metrics", GUARDED),
        ("/", "no route for GET /"),
    ],
)
def test_the_servers_own_routes_are_not_served_to_clients(stack, path, message):
    """The path as sent, byte for byte (httpx would resolve `..` and `//` itself): Envoy normalises it."""
    url = httpx.URL(f"http://127.0.0.1:{stack.ports['listen']}").copy_with(raw_path=path.encode())
    response = stack.client.get(url)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["message"].startswith(message)
    assert "x-graystack-variant" not in response.headers  # no variant was chosen


def test_an_unrouted_path_is_echoed_cut_short(stack):
    response = stack.client.get("/" + "x" * 5000)
    assert response.status_code == 404
    assert len(response.json()["error"]["message"]) < 300


def test_an_unrouted_anthropic_path_is_the_anthropic_sdks_not_found(stack):
    client, _ = clients(stack)
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.get("/v1/messages/batches", cast_to=object)
    assert raised.value.type == "not_found_error"


def test_models_are_answered_by_the_baseline_outside_the_analysis_counts(stack):
    """`GET /v1/models` goes to the baseline's endpoints through its own cluster, so no variant's
    request count (what the `direct` provider reads) moves."""
    before = envoy_stats(stack)
    response = stack.client.get("/v1/models", headers=ZERO_LAYER)
    assert response.status_code == 200
    assert response.headers["x-graystack-variant"] == "baseline"
    after = envoy_stats(stack)

    def moved(cluster: str) -> int:
        name = f"cluster.{cluster}.upstream_rq_total"
        return after.get(name, 0) - before.get(name, 0)

    assert moved("baseline-models") == 1
    assert moved("baseline") == moved("zero-layer") == 0
