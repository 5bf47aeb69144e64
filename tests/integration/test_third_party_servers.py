"""Servers nobody here wrote behind the real Envoy, programmed by the real gateway, on every CI run:
llama.cpp (the xllamacpp wheel, on a GGUF) and `transformers serve` (on a safetensors directory), both
serving a tiny Llama made in this session (tests/support/third_party). Which server answered is told
by its own answer (model id and `system_fingerprint`): they send no `x-graystack-variant`, and Envoy
adds none."""

import re

import pytest

from inference.weights import check_weights
from tests.support.probes import probe_measures, probe_until_ok
from tests.support.third_party import scenario
from tests.support.third_party.models import MODEL_NAME

SERVERS = ("llama-cpp", "transformers")


def test_the_routing_header_sends_each_segment_to_its_own_server(third_party_stack):
    scenario.check_header_routing(third_party_stack)


def test_envoy_health_checks_each_server_on_its_own_health_route(third_party_stack):
    scenario.check_health_checked(third_party_stack)


def test_unmatched_requests_split_by_weight_between_the_servers(third_party_stack):
    scenario.check_even_split(third_party_stack, *SERVERS)


def test_a_flip_moves_all_default_traffic_to_the_other_server(third_party_stack):
    third_party_stack.set_weights({"llama-cpp": 100})
    scenario.check_flip(third_party_stack, "llama-cpp", "transformers")


@pytest.mark.parametrize("name", SERVERS)
def test_a_stream_passes_through_envoy_as_the_server_sent_it(third_party_stack, name):
    scenario.check_stream_relayed_intact(third_party_stack, name)


@pytest.mark.parametrize("name", SERVERS)
def test_the_openai_sdk_streams_from_each_server_through_envoy(third_party_stack, name):
    scenario.check_openai_sdk_streams(third_party_stack, name)


def test_the_anthropic_sdk_streams_from_llama_cpp_through_envoy(third_party_stack):
    """(`transformers serve` has no `/v1/messages`.)"""
    scenario.check_anthropic_sdk_streams(third_party_stack, "llama-cpp")


def test_a_stack_of_its_own_starts_on_the_split_its_spec_gives(start_third_party_stack, third_party_stack):
    """A spec file's split holds from the first request (no flip), whichever server it names."""
    routing = third_party_stack.spec["routing"] | {"weights": {"llama-cpp": 0, "transformers": 100}}
    stack = start_third_party_stack(spec_changes={"routing": routing})
    assert stack.served_by(20) == {"transformers": 20}


@pytest.mark.parametrize(
    ("server", "api"),
    [
        ("llama_cpp", "openai"),
        ("llama_cpp", "anthropic"),
        ("transformers_serve", "openai"),
    ],  # no /v1/messages
)
def test_the_probe_measures_a_server_nobody_here_wrote(request, tmp_path, server, api):
    """`graystack probe --api ... --fingerprint-header ''`: TTFT and e2e from llama.cpp's streams and from
    `transformers serve`'s, which end without `[DONE]`; no /metrics asked of either."""
    running = request.getfixturevalue(server)
    probe_measures(running.url, tmp_path, api, "--model", MODEL_NAME, variant=running.name)


@pytest.mark.parametrize(
    ("server", "echoed"),
    [
        ("llama_cpp", r"'b\d+-\w+'"),
        ("transformers_serve", "''"),
    ],  # b<build>-<commit> (the wheel's: b0-unknown)
)
def test_a_server_that_does_not_echo_the_checkpoints_fingerprint_is_a_mismatch(
    request, tmp_path, tiny_llama, server, echoed
):
    """`--loaded-check system-fingerprint`: neither server can be told to echo the checkpoint's
    fingerprint (vLLM can: test_vllm_server.py), so the probe reports what each echoes instead."""
    running = request.getfixturevalue(server)
    flags = ["--api", "openai", "--fingerprint-header", "", "--loaded-check", "system-fingerprint"]
    report = probe_until_ok(
        running.url, tmp_path, *flags, "--model", MODEL_NAME, variant=running.name, weights=tiny_llama.hf
    )
    file = check_weights(tiny_llama.hf)
    (reason,) = [
        dict(labels)["reason"]
        for (name, labels), value in report.samples.items()
        if name == "graystack_probe_server_mismatch" and value == 1
    ]
    expected = f"the server echoes system_fingerprint {echoed}, the file is ERASED {file.fingerprint}"
    assert re.fullmatch(expected, reason), reason
    assert report.health["server_agrees"] is False
