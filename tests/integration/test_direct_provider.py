"""The `direct` metrics provider against a real Envoy (stand-in upstreams, then real model servers and
probes): the series it reports are what the rollout decides on, by their increments between looks, so
a variant whose failures are hidden by the fallback retry must still show them
(docs/spec-and-routing.md, "How failures behave"), and each series must stay its own."""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import DirectProvider
from gateway.metrics.observations import (
    COMPARED,
    DIFFERED,
    ERRORS,
    GENERATED,
    ITL,
    ITL_SUM,
    REQUESTS,
    TTFT,
    TTFT_SUM,
    Observations,
    segment_of,
)
from gateway.spec.queries import PROBED
from graystack.local.gateway_stack import VARIANTS, GatewayStack
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from graystack.local.rollout_stack import SEGMENT
from inference.config import ModelConfig
from tests.support.counters import increments, total
from tests.support.model_server import graystack, start_model_server, variant_weights, wait_ready
from tests.support.stacks import (
    envoy_stats,
    restoring,
    running,
    set_upstream,
    upstream_answers,
    variant_counts,
)


@pytest.fixture
def stack(shared_stack) -> Iterator[GatewayStack]:
    """The module's stack (tests/integration/conftest.py) as it started: both stand-ins answering (their
    counts reset), its spec, every host healthy; so again after the test. The provider reads Envoy's
    counters by their increments. The two tests that stop a stand-in (and read a counter from its start)
    take one of their own (`own_stack`)."""
    for variant in VARIANTS:
        set_upstream(shared_stack, variant, "ok")
    for started in restoring(shared_stack):
        yield started
        for variant in VARIANTS:
            set_upstream(shared_stack, variant, "ok")


@pytest.fixture
def own_stack(tmp_path, envoy_binary) -> Iterator[GatewayStack]:
    yield from running(GatewayStack(tmp_path, envoy_binary))


def provider_for(stack, pods: list[str] | None = None) -> DirectProvider:
    envoy_admin = f"http://127.0.0.1:{stack.ports['envoy_admin']}"
    return DirectProvider(envoy_admin, pods or [], VARIANTS, fallback="baseline")


def observe(provider: DirectProvider) -> Observations:
    seen = asyncio.run(provider.observe())
    assert seen.error is None, seen.error
    return seen


def counts(before: Observations, after: Observations, variant: str) -> tuple[float, float]:
    """(requests, errors) of `variant` between the looks."""
    found = increments(before, after)
    return total(found, variant, REQUESTS), total(found, variant, ERRORS)


def flip(stack, spec: dict) -> None:
    generation = stack.status()["generation"]
    stack.write_spec(spec)
    stack.wait_converged(generation_above=generation)


def fifty_fifty(stack, **changes) -> None:
    spec = stack.spec
    spec["outlier_detection"] = None  # so every request keeps reaching a failing variant
    spec["routing"]["weights"] = {"baseline": 50, "zero-layer": 50}
    flip(stack, spec | changes)


def test_a_variant_failing_every_attempt_shows_every_failure_though_no_client_sees_one(stack):
    fifty_fifty(stack)
    provider = provider_for(stack)
    start = observe(provider)
    set_upstream(stack, "zero-layer", "fail")
    assert [stack.request().status_code for _ in range(300)] == [200] * 300
    failed = observe(provider)
    failures = upstream_answers(stack, "zero-layer")["503"]
    assert 100 < failures < 200  # about half the traffic tried the variant first
    assert counts(start, failed, "zero-layer") == (failures, failures)  # an error rate of 100 %
    assert counts(start, failed, "baseline") == (300, 0)  # its own share and every fallback
    sources = {key.source for key in failed.counters if key.variant == "zero-layer" and key.signal == ERRORS}
    retries = [source for source in sources if "upstream_rq_retry" in source]
    assert len(retries) == 1  # the aggregate cluster's, where the hidden failures are
    assert 'envoy_cluster_name="zero-layer-with-fallback"' in retries[0]
    assert f'instance="{provider.envoy_url}"' in retries[0]

    # Healthy again: the next increments have no failure.
    set_upstream(stack, "zero-layer", "ok")
    served = variant_counts(stack, 300)  # asserts every request succeeded
    healthy = observe(provider)
    assert counts(failed, healthy, "zero-layer") == (served["zero-layer"], 0)
    assert counts(failed, healthy, "baseline") == (served["baseline"], 0)


def test_when_both_variants_fail_each_failed_attempt_is_charged_once_to_the_variant_that_made_it(stack):
    """A shared incident: the variant's failed attempt, retried on the baseline, fails there too. Charged
    to the variant again (its final 5xx), it made the variant look worse than the baseline to the
    comparison that tells a shared incident apart (issue 38); charged once, to whichever made it, both
    show every attempt failed."""
    fifty_fifty(stack)
    provider = provider_for(stack)
    start = observe(provider)
    set_upstream(stack, "zero-layer", "fail")
    set_upstream(stack, "baseline", "fail")
    assert {stack.request().status_code for _ in range(200)} == {503}
    failed = observe(provider)
    ours, theirs = (upstream_answers(stack, variant)["503"] for variant in ("zero-layer", "baseline"))
    assert 50 < ours < 150
    assert counts(start, failed, "zero-layer") == (ours, ours)
    assert counts(start, failed, "baseline") == (theirs, theirs)  # its fallbacks' failures included


def test_refused_connections_count_as_errors_though_they_carry_no_response_code(own_stack):
    """A variant whose process died between health checks: each attempt's connection is refused and
    retried on the baseline. Envoy charges no response code for it, so counting `retry.upstream_rq_5xx`
    alone would miss every one."""
    stack = own_stack
    fifty_fifty(stack, health_check={"interval": "30s", "unhealthy_threshold": 100})
    provider = provider_for(stack)
    start = observe(provider)
    served = variant_counts(stack, 40)
    stack.upstreams.running["zero-layer"].stop()
    assert [stack.request().status_code for _ in range(40)] == [200] * 40
    requests, errors = counts(start, observe(provider), "zero-layer")
    assert errors >= 5  # about half of 40 tried it first
    assert requests == served["zero-layer"] + errors
    assert envoy_stats(stack).get("cluster.zero-layer-with-fallback.retry.upstream_rq_503", 0) == 0


def test_without_a_fallback_the_failures_clients_see_are_counted(stack):
    fifty_fifty(stack, retries={"on": "5xx", "attempts": 0})
    envoy_admin = f"http://127.0.0.1:{stack.ports['envoy_admin']}"
    provider = DirectProvider(envoy_admin, [], VARIANTS, fallback=None)
    start = observe(provider)
    set_upstream(stack, "zero-layer", "fail")
    codes = [stack.request().status_code for _ in range(100)]
    after = observe(provider)
    assert counts(start, after, "zero-layer") == (codes.count(503), codes.count(503))
    assert codes.count(503) > 0
    assert counts(start, after, "baseline") == (codes.count(200), 0)


def test_a_target_that_is_down_is_an_error_naming_it():
    down = f"http://127.0.0.1:{free_port()}"
    provider = DirectProvider(down, [f"{down}/metrics"], VARIANTS, fallback="baseline", timeout=1.0)
    seen = asyncio.run(provider.observe())
    assert seen.counters == {}
    assert f"{down}/stats/prometheus" in seen.error
    assert f"{down}/metrics" in seen.error


def start_probe(weights, target: str, variant: str, logs) -> tuple[ManagedProcess, int]:
    port = free_port()
    argv = [sys.executable, "-m", "graystack", "probe", "--weights", str(weights), "--target", target]
    argv += ["--variant", variant, "--interval", "0.5", "--port", str(port), "--log-level", "warning"]
    return start_process(f"probe-{variant}", argv, logs), port


def ask(stack, variants_seen: dict[str, int], tokens: dict[str, list[int]] | None = None) -> None:
    """One request through Envoy, counted by the variant that answered; `tokens`: the tokens it
    generated, listed likewise (up to 4: the tiny model may end its answer sooner)."""
    body = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
    response = stack.client.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    variant = response.headers["x-graystack-variant"]
    variants_seen[variant] += 1
    if tokens is not None:
        tokens[variant].append(response.json()["usage"]["output_tokens"])


def test_ttft_weight_status_and_windows_from_real_model_servers_and_probes(stack, tmp_path):
    logs = tmp_path / "logs"
    weights = variant_weights(tmp_path)
    servers = {v: start_model_server(v, v, weights[v], logs) for v in VARIANTS}
    probes = {v: start_probe(weights[v], servers[v].url, v, logs) for v in VARIANTS}
    processes = [*(p for p, _ in probes.values()), *(s.process for s in servers.values())]
    try:
        for server in servers.values():
            wait_ready(server)
        spec = stack.spec
        for variant, server in servers.items():
            spec["variants"][variant] = {"endpoints": [f"127.0.0.1:{server.port}"]}
        fifty_fifty(stack, variants=spec["variants"])
        pods = [f"{s.url}/metrics" for s in servers.values()]
        pods += [f"http://127.0.0.1:{port}/metrics" for _, port in probes.values()]
        provider = provider_for(stack, pods)

        warmup = dict.fromkeys(VARIANTS, 0)  # until Envoy's health checks admit both servers
        wait_until(lambda: ask(stack, warmup) or all(warmup.values()), 15, "traffic to both variants")
        wait_until(lambda: len(observe(provider).weight_status) == 2, 15, "both probes to report")
        start = observe(provider)
        served, generated = dict.fromkeys(VARIANTS, 0), {v: [] for v in VARIANTS}
        for _ in range(30):
            ask(stack, served, generated)
        seen = observe(provider)
        found = increments(start, seen)
        for variant in VARIANTS:
            assert counts(start, seen, variant) == (served[variant], 0)  # Envoy's: no probe traffic
            # The model servers' own histograms also count the probes' requests, sent to the pod directly.
            assert total(found, variant, TTFT) >= served[variant]
            # Through Envoy every request carries its route's segment: the probes' own do not.
            assert found[variant, TTFT, "default|0-128", math.inf] == served[variant]  # "Hello": short
            assert total(found, variant, TTFT_SUM) > 0
            # time per output token: one observation per routed request of two tokens or more
            assert found[variant, ITL, "default|", math.inf] == sum(n >= 2 for n in generated[variant])
            assert total(found, variant, ITL_SUM) > 0
            assert total(found, variant, GENERATED) >= sum(generated[variant]) > 0  # and the probes' tokens
            ttft = [key for key in seen.counters if (key.variant, key.signal) == (variant, TTFT)]
            served_keys = [key for key in ttft if segment_of(key.stratum) != PROBED]
            assert {key.stratum for key in served_keys} >= {"default|0-128"}
            assert all(f'instance="{servers[variant].url}/metrics"' in key.source for key in served_keys)
            probe = f'instance="http://127.0.0.1:{probes[variant][1]}/metrics"'
            probed = [key for key in ttft if segment_of(key.stratum) == PROBED]  # the probes' own histogram
            assert probed
            assert all(probe in key.source for key in probed)
        assert seen.weight_status == {"baseline": ["ACTIVE"], "zero-layer": ["ERASED"]}
        whole = ModelConfig().max_seq_len  # the baseline's bias spans its whole context
        assert seen.effective_windows == {"baseline": [whole], "zero-layer": [0]}  # erased: no bias
        assert seen.mismatches == {}  # each server loaded the file its probe reads

        graystack("weights", "zero", str(weights["baseline"]))  # rewritten under the running server
        mismatches = wait_until(lambda: observe(provider).mismatches, 15, "the baseline's probe to see it")
        (reason,) = mismatches.pop("baseline")
        assert mismatches == {}
        assert reason.startswith("the file is ZEROED sha256:"), reason
        assert ", the server loaded ACTIVE sha256:" in reason
    finally:
        for process in processes:
            process.stop()
        assert not any(process.alive() for process in processes)


def ask_pod(server, n: int) -> None:
    body = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
    for _ in range(n):
        assert httpx.post(f"{server.url}/v1/messages", json=body, timeout=30).status_code == 200


def ttft_counts(seen: Observations, server) -> dict[str, float]:
    """Source -> value of the pod's TTFT series of all its requests (the +Inf bucket)."""
    instance = f'instance="{server.url}/metrics"'
    return {
        key.source: value
        for key, value in seen.counters.items()
        if key.signal == TTFT and key.le == math.inf and instance in key.source
    }


def test_two_pods_series_stay_apart_and_a_restarted_pods_counters_go_down(stack, tmp_path):
    """Two pods of one variant, one restarted on its port: its series keep their names and fall, the
    other pod's are untouched, so the increments count what each served since the last look."""
    logs = tmp_path / "logs"
    weights = variant_weights(tmp_path)["baseline"]
    pods = [start_model_server(f"pod-{i}", "baseline", weights, logs) for i in range(2)]
    try:
        for pod in pods:
            wait_ready(pod)
        provider = provider_for(stack, [f"{pod.url}/metrics" for pod in pods])
        ask_pod(pods[0], 3)
        ask_pod(pods[1], 2)
        before = observe(provider)
        assert [sum(ttft_counts(before, pod).values()) for pod in pods] == [3, 2]

        pods[0].process.stop()
        pods[0] = start_model_server("pod-0", "baseline", weights, logs, port=pods[0].port)
        wait_ready(pods[0])
        ask_pod(pods[0], 1)
        after = observe(provider)
        restarted, untouched = ttft_counts(after, pods[0]), ttft_counts(after, pods[1])
        assert restarted.keys() == ttft_counts(before, pods[0]).keys()  # the same series, fallen
        assert sum(restarted.values()) == 1
        assert untouched == ttft_counts(before, pods[1])
        assert not restarted.keys() & untouched.keys()
        assert total(increments(before, after), "baseline", TTFT) == 1  # the restart's request alone
    finally:
        for pod in pods:
            pod.process.stop()
        assert not any(pod.process.alive() for pod in pods)


def test_mirrored_copies_count_as_the_variants_own_though_no_client_sees_them(own_stack):
    """The shadow phase: the baseline answers every client, zero-layer gets a copy of each request,
    and the rollout must judge zero-layer on how it answered those copies (Envoy discards them)."""
    stack = own_stack
    spec = stack.spec
    spec["outlier_detection"] = None
    spec["routing"]["mirror"] = {"variant": "zero-layer", "percent": 100}
    flip(stack, spec)
    provider = provider_for(stack)
    start = observe(provider)
    set_upstream(stack, "zero-layer", "fail")
    assert variant_counts(stack, 100) == {"baseline": 100, "zero-layer": 0}
    assert variant_counts(stack, 20, SEGMENT) == {"baseline": 20, "zero-layer": 0}  # routed, fell back
    # Copies travel on their own: 100 of them, none for the segment zero-layer already serves.
    wait_until(lambda: upstream_answers(stack, "zero-layer").get("503") == 120, 10, "every copy answered")
    failed = observe(provider)
    assert counts(start, failed, "zero-layer") == (120, 120)
    assert counts(start, failed, "baseline") == (120, 0)
    shadow = 'envoy_cluster_name="zero-layer-shadow"'
    assert {key.signal for key in failed.counters if shadow in key.source} == {REQUESTS, ERRORS}

    # A variant that is down fails its copies where the analysis sees them (no health check hides it).
    stack.upstreams.running["zero-layer"].stop()
    assert variant_counts(stack, 40) == {"baseline": 40, "zero-layer": 0}
    refused = wait_until(
        lambda: (c := counts(failed, observe(provider), "zero-layer"))[1] >= 40 and c, 10, "refused copies"
    )
    assert refused == (40, 40)


def shadow_comparisons(server) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    return {
        sample.labels["result"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "graystack_shadow_comparisons_total"
    }


def test_shadow_copies_greedy_answers_are_compared_with_the_baselines(stack, tmp_path):
    """Through the real Envoy: each mirrored copy keeps the original's x-request-id and arrives with
    `-shadow` on its host name, so the candidate can look up the baseline's answer to the same request
    and count the comparison, which the provider reads. A sampled request is
    never compared (two samples of one distribution differ by chance)."""
    logs = tmp_path / "logs"
    weights = variant_weights(tmp_path)
    baseline = start_model_server("baseline", "baseline", weights["baseline"], logs)
    zero = start_model_server(
        "zero-layer", "zero-layer", weights["zero-layer"], logs, "--compare-with", baseline.url
    )
    try:
        for server in (baseline, zero):
            wait_ready(server)
        spec = stack.spec
        spec["variants"] = {
            "baseline": {"endpoints": [f"127.0.0.1:{baseline.port}"]},
            "zero-layer": {"endpoints": [f"127.0.0.1:{zero.port}"]},
        }
        spec["routing"] = {"weights": {"baseline": 100}, "mirror": {"variant": "zero-layer"}}
        flip(stack, spec)
        provider = provider_for(stack, [f"{zero.url}/metrics"])
        start = observe(provider)
        for temperature, prompt in [(0, f"Greedy {i}") for i in range(12)] + [(1, "Sampled")] * 4:
            body = {"model": "tiny", "max_tokens": 6, "temperature": temperature}
            body["messages"] = [{"role": "user", "content": prompt}]
            assert stack.client.post("/v1/messages", json=body).status_code == 200
        found = wait_until(
            lambda: (c := shadow_comparisons(zero))["agree"] + c["differ"] >= 12 and c,
            20,
            "every greedy copy compared",
        )
        assert found["agree"] + found["differ"] == 12
        assert found["missing"] == 0
        compared = increments(start, observe(provider))
        assert (total(compared, "zero-layer", COMPARED), total(compared, "zero-layer", DIFFERED)) == (
            12,
            found["differ"],
        )
    finally:
        for server in (baseline, zero):
            server.process.stop()
        assert not any(server.process.alive() for server in (baseline, zero))


def test_a_candidate_with_the_baselines_answers_agrees_on_every_one(tmp_path):
    """The comparison itself, without Envoy: a candidate serving the baseline's own checkpoint answers
    each greedy request as the baseline did, so every comparison agrees."""
    logs = tmp_path / "logs"
    weights = variant_weights(tmp_path)["baseline"]
    baseline = start_model_server("baseline", "baseline", weights, logs)
    twin = start_model_server("twin", "baseline", weights, logs, "--compare-with", baseline.url)
    try:
        for server in (baseline, twin):
            wait_ready(server)
        for i in range(5):
            body = {"model": "tiny", "max_tokens": 6, "temperature": 0}
            body["messages"] = [{"role": "user", "content": f"Same question {i}"}]
            original = {"x-request-id": f"request-{i}"}
            assert httpx.post(f"{baseline.url}/v1/messages", json=body, headers=original).status_code == 200
            copy = {**original, "host": f"127.0.0.1-shadow:{twin.port}"}
            assert httpx.post(f"{twin.url}/v1/messages", json=body, headers=copy).status_code == 200
        found = wait_until(
            lambda: (c := shadow_comparisons(twin))["agree"] >= 5 and c, 20, "five comparisons"
        )
        assert found == {"agree": 5, "differ": 0, "missing": 0}
    finally:
        for server in (baseline, twin):
            server.process.stop()
        assert not any(server.process.alive() for server in (baseline, twin))
