"""The `direct` metrics provider against a real Envoy (stand-in upstreams, then real model servers and
probes): what it reports is what the rollout decides on, so a variant whose failures are hidden by the
fallback retry must still show them (shared/research/envoy_fallback_retry.md)."""

from __future__ import annotations

import asyncio
import sys

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import DirectProvider
from gateway.rollout.analysis import Observations, analyse
from gateway.rollout.spec import Analysis
from gateway.rollout.stats import Verdict
from graystack.local.gateway_stack import VARIANTS
from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until
from graystack.local.rollout_stack import SEGMENT
from inference.config import ModelConfig
from tests.support.model_server import start_model_server, variant_weights, wait_ready

WINDOW = 60.0


class FakeClock:
    """Window time, moved by the test: which scrapes fall inside a window never depends on timing."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def provider_for(stack, pods: list[str] | None = None, clock=None) -> DirectProvider:
    envoy_admin = f"http://127.0.0.1:{stack.ports['envoy_admin']}"
    kwargs = {"clock": clock} if clock else {}
    return DirectProvider(envoy_admin, pods or [], VARIANTS, fallback="baseline", **kwargs)


def observe(provider: DirectProvider) -> Observations:
    seen = asyncio.run(provider.observe(WINDOW))
    assert seen.error is None, seen.error
    return seen


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
    clock = FakeClock()
    provider = provider_for(stack, clock=clock)
    observe(provider)  # the window's starting point
    stack.set_upstream("zero-layer", "fail")
    assert [stack.request().status_code for _ in range(300)] == [200] * 300
    clock.now += 10
    seen = observe(provider)
    failures = stack.upstream_answers("zero-layer")["503"]
    zero, baseline = seen.variants["zero-layer"], seen.variants["baseline"]
    assert 100 < failures < 200  # about half the traffic tried the variant first
    assert zero.requests == zero.errors == failures  # an error rate of 100 %
    assert baseline.errors == 0
    assert baseline.requests == 300  # its own share and every fallback
    checks = {c.name: c.verdict for c in analyse(Analysis(min_requests=50), seen, "zero-layer", "baseline")}
    assert checks["error_rate"] == Verdict.FAIL

    # Healthy again; a minute on, the failures have left the window.
    stack.set_upstream("zero-layer", "ok")
    clock.now += WINDOW + 1
    observe(provider)
    counts = stack.variant_counts(300)  # asserts every request succeeded
    clock.now += 10
    seen = wait_until(
        lambda: (s := observe(provider)).variants["zero-layer"].latency_p99 and s,
        10,
        "Envoy's next stats flush (histograms are updated every 5 s)",
    )
    zero, baseline = seen.variants["zero-layer"], seen.variants["baseline"]
    assert (zero.requests, zero.errors) == (counts["zero-layer"], 0)
    assert (baseline.requests, baseline.errors) == (counts["baseline"], 0)
    assert zero.latency_p99 > 0
    assert baseline.latency_p99 > 0


def test_refused_connections_count_as_errors_though_they_carry_no_response_code(stack):
    """A variant whose process died between health checks: each attempt's connection is refused and
    retried on the baseline. Envoy charges no response code for it, so counting `retry.upstream_rq_5xx`
    alone would miss every one."""
    fifty_fifty(stack, health_check={"interval": "30s", "unhealthy_threshold": 100})
    provider = provider_for(stack)
    observe(provider)
    counts = stack.variant_counts(40)
    stack.upstreams["zero-layer"].stop()
    assert [stack.request().status_code for _ in range(40)] == [200] * 40
    zero = observe(provider).variants["zero-layer"]
    assert zero.errors >= 5  # about half of 40 tried it first
    assert zero.requests == counts["zero-layer"] + zero.errors
    assert stack.envoy_stats().get("cluster.zero-layer-with-fallback.retry.upstream_rq_503", 0) == 0


def test_without_a_fallback_the_failures_clients_see_are_counted(stack):
    fifty_fifty(stack, retries={"on": "5xx", "attempts": 0})
    envoy_admin = f"http://127.0.0.1:{stack.ports['envoy_admin']}"
    provider = DirectProvider(envoy_admin, [], VARIANTS, fallback=None)
    observe(provider)
    stack.set_upstream("zero-layer", "fail")
    codes = [stack.request().status_code for _ in range(100)]
    seen = observe(provider)
    zero = seen.variants["zero-layer"]
    assert zero.requests == zero.errors == codes.count(503) > 0
    assert seen.variants["baseline"].requests == codes.count(200)
    assert seen.variants["baseline"].errors == 0


def test_a_target_that_is_down_is_an_error_naming_it():
    down = f"http://127.0.0.1:{free_port()}"
    provider = DirectProvider(down, [f"{down}/metrics"], VARIANTS, fallback="baseline", timeout=1.0)
    seen = asyncio.run(provider.observe(WINDOW))
    assert seen.variants == {}
    assert f"{down}/stats/prometheus" in seen.error
    assert f"{down}/metrics" in seen.error


def start_probe(weights, target: str, variant: str, logs) -> tuple[ManagedProcess, int]:
    port = free_port()
    argv = [sys.executable, "-m", "graystack", "probe", "--weights", str(weights), "--target", target]
    argv += ["--variant", variant, "--interval", "0.5", "--port", str(port), "--log-level", "warning"]
    return start_process(f"probe-{variant}", argv, logs), port


def ask(stack, variants_seen: dict[str, int]) -> None:
    body = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
    response = stack.client.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    variants_seen[response.headers["x-graystack-variant"]] += 1


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
        counts = dict.fromkeys(VARIANTS, 0)
        for _ in range(30):
            ask(stack, counts)
        seen = observe(provider)
        for variant in VARIANTS:
            window = seen.variants[variant]
            assert (window.requests, window.errors) == (counts[variant], 0)  # Envoy's: no probe traffic
            assert window.ttft_p95 > 0
        assert seen.weight_status == {"baseline": ["ACTIVE"], "zero-layer": ["ERASED"]}
        whole = ModelConfig().max_seq_len  # the baseline's bias spans its whole context
        assert seen.effective_windows == {"baseline": [whole], "zero-layer": [0]}  # erased: no bias
        # An ACTIVE pod with a whole-context bias is not the derived sparse form a bound admits.
        bounded = Analysis(expected_weight_status=["ACTIVE"], max_effective_window=64)
        check = analyse(bounded, seen, "baseline", "zero-layer")[-1]
        assert (check.name, check.verdict) == ("weight_status", Verdict.FAIL)
        assert check.reason == f"pods serve effective window [{whole}], above max_effective_window 64"
    finally:
        for process in processes:
            process.stop()
        assert not any(process.alive() for process in processes)


def test_mirrored_copies_count_as_the_variants_own_though_no_client_sees_them(stack):
    """The shadow phase: the baseline answers every client, zero-layer gets a copy of each request,
    and the rollout must judge zero-layer on how it answered those copies (Envoy discards them)."""
    spec = stack.spec
    spec["outlier_detection"] = None
    spec["routing"]["mirror"] = {"variant": "zero-layer", "percent": 100}
    flip(stack, spec)
    clock = FakeClock()
    provider = provider_for(stack, clock=clock)
    observe(provider)
    stack.set_upstream("zero-layer", "fail")
    assert stack.variant_counts(100) == {"baseline": 100, "zero-layer": 0}
    assert stack.variant_counts(20, SEGMENT) == {"baseline": 20, "zero-layer": 0}  # routed, fell back
    # Copies travel on their own: 100 of them, none for the segment zero-layer already serves.
    wait_until(lambda: stack.upstream_answers("zero-layer").get("503") == 120, 10, "every copy answered")
    clock.now += 10
    seen = observe(provider)
    zero, baseline = seen.variants["zero-layer"], seen.variants["baseline"]
    assert zero.requests == zero.errors == 120
    assert (baseline.requests, baseline.errors) == (120, 0)
    checks = {c.name: c.verdict for c in analyse(Analysis(min_requests=50), seen, "zero-layer", "baseline")}
    assert checks["error_rate"] == Verdict.FAIL

    # A variant that is down fails its copies where the analysis sees them (no health check hides it).
    stack.upstreams["zero-layer"].stop()
    clock.now += WINDOW + 1
    observe(provider)
    assert stack.variant_counts(40) == {"baseline": 40, "zero-layer": 0}
    clock.now += 10
    zero = wait_until(
        lambda: (z := observe(provider).variants["zero-layer"]).errors >= 40 and z, 10, "refused copies"
    )
    assert zero.requests == zero.errors == 40


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
    and count the comparison, which the provider reads and the analysis judges. A sampled request is
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
        observe(provider)
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
        seen = observe(provider)
        candidate = seen.variants["zero-layer"]
        assert (candidate.shadow_compared, candidate.shadow_agreed) == (12, found["agree"])
        check = analyse(Analysis(min_requests=10, min_shadow_agreement=0.5), seen, "zero-layer", "baseline")[
            -1
        ]
        assert (check.name, check.samples, check.value) == ("shadow_agreement", 12, found["agree"] / 12)
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
