"""The `prometheus` provider against a real Prometheus scraping the real Envoy: it must report what the
`direct` provider reports (a variant whose failures the fallback retry hides still shows them), call
no data 0 requests, and turn a failed query into an error naming it."""

from __future__ import annotations

import asyncio
import sys

import pytest

from gateway.metrics import DirectProvider
from gateway.metrics.prometheus import QUERIES, PrometheusProvider, render
from gateway.rollout.analysis import Observations, analyse
from gateway.rollout.spec import Analysis
from gateway.rollout.stats import Verdict
from graystack.local.gateway_stack import VARIANTS, GatewayStack
from graystack.local.processes import free_port, start_process, wait_until
from inference.config import ModelConfig
from tests.support.model_server import start_model_server, variant_weights, wait_ready
from tests.support.processes import require_binary
from tests.support.prometheus import PrometheusServer, start_prometheus

WINDOW = 60.0


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    return require_binary("prometheus", "Debian's prometheus package", provided_by="make prometheus")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, envoy_binary, prometheus_binary):
    """One stack for the module (the tests that share it send no traffic but the first): 50/50 with the
    fallback and no outlier detection, so that every request keeps reaching a failing variant. Not
    started without Prometheus, which every test using it needs."""
    running = GatewayStack(tmp_path_factory.mktemp("stack"), envoy_binary)
    try:
        running.start()
        spec = running.spec
        spec["outlier_detection"] = None
        spec["routing"]["weights"] = {"baseline": 50, "zero-layer": 50}
        generation = running.status()["generation"]
        running.write_spec(spec)
        running.wait_converged(generation_above=generation)
        yield running
    finally:
        running.stop()
        for process in [running.envoy, running.gateway, *running.upstreams.values()]:
            assert process is None or not process.alive(), f"{process.name} (pid {process.pid}) left running"


@pytest.fixture(scope="module")
def prometheus(stack, tmp_path_factory, prometheus_binary):
    """Scraping the stack's Envoy; started after the flip, so the variant's counters start at 0."""
    envoy = (f"127.0.0.1:{stack.ports['envoy_admin']}", "/stats/prometheus")
    server = start_prometheus(prometheus_binary, tmp_path_factory.mktemp("prometheus"), {"envoy": envoy})
    try:
        wait_until(lambda: scrapes_of_envoy(server) >= 2, 20, "two scrapes of Envoy")
        yield server
    finally:
        server.stop()
        assert not server.process.alive(), f"prometheus (pid {server.process.pid}) left running"


def scrapes_of_envoy(server: PrometheusServer) -> int:
    """How many scrapes of Envoy Prometheus holds (samples of one of its series)."""
    answer = server.query(
        'count_over_time(envoy_cluster_upstream_rq_total{envoy_cluster_name="zero-layer"}[1m])'
    )
    return int(float(answer["data"]["result"][0]["value"][1])) if answer["data"]["result"] else 0


def last_scrape_where(server: PrometheusServer, *conditions: str) -> float | None:
    """The timestamp of Envoy's latest scrape, once every condition (a one-series filter such as
    `x{...} == 3`) holds there."""
    result = server.query(
        " and on (instance) ".join(["timestamp(envoy_cluster_upstream_rq_total)", *conditions])
    )
    return max((float(s["value"][1]) for s in result["data"]["result"]), default=None)


def test_a_variant_failing_every_attempt_shows_every_failure_though_no_client_sees_one(stack, prometheus):
    direct = DirectProvider(
        f"http://127.0.0.1:{stack.ports['envoy_admin']}", [], VARIANTS, fallback="baseline"
    )
    asyncio.run(direct.observe(WINDOW))  # the direct provider's starting point
    stack.set_upstream("zero-layer", "fail")
    assert [stack.request().status_code for _ in range(300)] == [200] * 300
    failures = stack.upstream_answers("zero-layer")["503"]
    assert 100 < failures < 200  # about half the traffic tried the variant first
    baseline_total = stack.envoy_stats()[
        "cluster.baseline.upstream_rq_total"
    ]  # its share, the fallbacks, warm-up
    # Evaluated at a scrape that saw all of it (and a stats flush of the latency histograms): with the
    # variant's counters at 0 in the first scrape, increase() neither extrapolates nor misses anything.
    after_traffic = (
        f'envoy_cluster_upstream_rq_retry{{envoy_cluster_name="zero-layer-with-fallback"}} == {failures}',
        f'envoy_cluster_upstream_rq_total{{envoy_cluster_name="baseline"}} == {baseline_total}',
        'sum by (instance) (envoy_cluster_upstream_rq_time_count{envoy_cluster_name=~"baseline|zero-layer-with-fallback"})'
        " >= 300",
    )
    at = wait_until(lambda: last_scrape_where(prometheus, *after_traffic), 15, "a scrape after the traffic")

    seen = asyncio.run(
        PrometheusProvider(prometheus.url, VARIANTS, "baseline", clock=lambda: at).observe(WINDOW)
    )
    assert seen.error is None, seen.error
    zero, baseline = seen.variants["zero-layer"], seen.variants["baseline"]
    assert zero.requests == pytest.approx(failures)
    assert zero.errors == pytest.approx(failures)  # an error rate of 100 %
    assert baseline.errors == 0
    assert 300 <= round(baseline.requests) <= baseline_total  # extrapolated back at most to 0
    assert baseline.latency_p99 > 0
    assert seen.weight_status == {}  # no probes here: no data, not an error
    checks = {c.name: c.verdict for c in analyse(Analysis(min_requests=50), seen, "zero-layer", "baseline")}
    assert checks["error_rate"] == Verdict.FAIL

    by_direct = asyncio.run(direct.observe(WINDOW)).variants["zero-layer"]
    assert (by_direct.requests, by_direct.errors) == (failures, failures)


def test_every_built_in_query_runs_on_a_live_server(stack, prometheus):
    route_cluster = PrometheusProvider(prometheus.url, VARIANTS, "baseline").route_cluster
    for variant in VARIANTS:
        for name, template in QUERIES.items():
            answer = prometheus.query(render(template, variant, route_cluster(variant), WINDOW))
            assert answer["status"] == "success", (name, answer)


def test_no_data_is_zero_requests_and_a_bad_query_is_an_error_naming_it(stack, prometheus):
    nobody = PrometheusProvider(prometheus.url, ["nobody", "baseline"], fallback="baseline")
    seen = asyncio.run(nobody.observe(WINDOW))
    assert seen.error is None
    assert seen.variants["nobody"].requests == seen.variants["nobody"].errors == 0
    assert seen.variants["nobody"].latency_p99 is None
    checks = {c.name: c.verdict for c in analyse(Analysis(), seen, "nobody", "baseline")}
    assert checks["error_rate"] == Verdict.INCONCLUSIVE

    broken = PrometheusProvider(
        prometheus.url, VARIANTS, "baseline", queries={"failed": "sum(rate(x[{window}])"}
    )
    error = asyncio.run(broken.observe(WINDOW)).error
    assert "'failed'" in error
    assert "bad_data" in error


def test_prometheus_down_is_an_error_naming_the_query():
    down = PrometheusProvider(f"http://127.0.0.1:{free_port()}", VARIANTS, "baseline", timeout=1.0)
    seen: Observations = asyncio.run(down.observe(WINDOW))
    assert seen.variants == {}
    assert "prometheus query 'attempts' for baseline" in seen.error
    assert "ConnectError" in seen.error


def test_ttft_weight_status_and_windows_from_real_model_servers_and_probes(tmp_path, prometheus_binary):
    """Envoy sees no first token: TTFT comes from the model servers' histogram, weight status from the
    probes and effective windows from the model servers' info series, all scraped by Prometheus. The
    probes' synthetic requests keep the TTFT series moving."""
    logs = tmp_path / "logs"
    weights = variant_weights(tmp_path)
    servers = {v: start_model_server(v, v, weights[v], logs) for v in VARIANTS}
    probes = {v: free_port() for v in VARIANTS}
    processes = [s.process for s in servers.values()]
    for variant, port in probes.items():
        argv = [sys.executable, "-m", "graystack", "probe", "--weights", str(weights[variant])]
        argv += ["--target", servers[variant].url, "--variant", variant, "--interval", "0.5"]
        processes.append(start_process(f"probe-{variant}", [*argv, "--port", str(port)], logs))
    targets = {f"server-{v}": (f"127.0.0.1:{s.port}", "/metrics") for v, s in servers.items()}
    targets |= {f"probe-{v}": (f"127.0.0.1:{port}", "/metrics") for v, port in probes.items()}
    prometheus = start_prometheus(prometheus_binary, tmp_path / "prometheus", targets)
    processes.append(prometheus.process)
    try:
        for server in servers.values():
            wait_ready(server)
        provider = PrometheusProvider(prometheus.url, VARIANTS, "baseline")

        def measured() -> Observations | None:
            seen = asyncio.run(provider.observe(WINDOW))
            assert seen.error is None, seen.error
            ttfts = [seen.variants[v].ttft_p95 for v in VARIANTS]
            reported = len(seen.weight_status) == len(seen.effective_windows) == 2
            return seen if reported and all(ttfts) else None

        seen = wait_until(measured, 30, "TTFT, weight status and windows of both variants")
        assert seen.weight_status == {"baseline": ["ACTIVE"], "zero-layer": ["ERASED"]}
        assert seen.effective_windows == {"baseline": [ModelConfig().max_seq_len], "zero-layer": [0]}
        for variant in VARIANTS:
            assert seen.variants[variant].ttft_p95 > 0
            assert seen.variants[variant].requests == 0  # Envoy's count: the probes' requests are not in it
    finally:
        for process in processes:
            process.stop()
        assert not any(process.alive() for process in processes)
