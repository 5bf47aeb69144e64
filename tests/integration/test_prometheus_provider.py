"""The `prometheus` provider against a real Prometheus scraping the real Envoy: it must report the
series the `direct` provider reports, so that both give the same increments between two looks (a
variant whose failures the fallback retry hides still shows them), call no data no entry, and turn a
failed query into an error naming it."""

from __future__ import annotations

import asyncio
import math
import sys
import time

import pytest

from gateway.metrics import DirectProvider
from gateway.metrics.observations import ERRORS, REQUESTS, TTFT, TTFT_SUM, Observations, segment_of
from gateway.metrics.prometheus import PrometheusProvider
from gateway.spec.queries import PROBED, QUERIES
from graystack.local.gateway_stack import VARIANTS, GatewayStack
from graystack.local.processes import free_port, start_process, wait_until
from inference.config import ModelConfig
from tests.support.counters import increments, total
from tests.support.model_server import start_model_server, variant_weights, wait_ready
from tests.support.processes import require_binary
from tests.support.prometheus import PrometheusServer, start_prometheus
from tests.support.stacks import set_upstream, upstream_answers


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
        for process in [running.envoy, running.gateway, *running.upstreams.processes()]:
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


def scrape_after(server: PrometheusServer, instant: float) -> float:
    """The timestamp of Prometheus' first scrape of Envoy that started after `instant` (Unix seconds)."""

    def scraped() -> float | None:
        result = server.query("timestamp(envoy_cluster_upstream_rq_total)")["data"]["result"]
        latest = max((float(series["value"][1]) for series in result), default=0.0)
        return latest if latest > instant else None

    return wait_until(scraped, 15, "a scrape of Envoy after the look")


def looks(stack, server: PrometheusServer) -> tuple[Observations, Observations]:
    """One look by the direct provider and one by the prometheus provider at a scrape taken after it,
    with no traffic between: both see the same counters."""
    direct = DirectProvider(f"http://127.0.0.1:{stack.ports['envoy_admin']}", [], VARIANTS, "baseline")
    seen = asyncio.run(direct.observe())
    at = scrape_after(server, time.time())
    by_prometheus = asyncio.run(
        PrometheusProvider(server.url, VARIANTS, "baseline", clock=lambda: at).observe()
    )
    assert seen.error is None, seen.error
    assert by_prometheus.error is None, by_prometheus.error
    return seen, by_prometheus


def test_both_providers_give_the_same_increments_and_show_every_hidden_failure(stack, prometheus):
    direct_before, prometheus_before = looks(stack, prometheus)
    set_upstream(stack, "zero-layer", "fail")
    assert [stack.request().status_code for _ in range(300)] == [200] * 300
    failures = upstream_answers(stack, "zero-layer")["503"]
    assert 100 < failures < 200  # about half the traffic tried the variant first
    direct_after, prometheus_after = looks(stack, prometheus)

    by_direct = increments(direct_before, direct_after)
    by_prometheus = increments(prometheus_before, prometheus_after)
    assert by_prometheus == by_direct
    assert (total(by_prometheus, "zero-layer", REQUESTS), total(by_prometheus, "zero-layer", ERRORS)) == (
        failures,
        failures,
    )  # an error rate of 100 %
    assert (total(by_prometheus, "baseline", REQUESTS), total(by_prometheus, "baseline", ERRORS)) == (300, 0)
    # Series by series: the same ones, each named by its instance and labels.
    assert len(prometheus_after.counters) == len(direct_after.counters)
    instance = f'instance="127.0.0.1:{stack.ports["envoy_admin"]}"'
    assert all(instance in key.source and 'job="envoy"' in key.source for key in prometheus_after.counters)
    assert prometheus_after.weight_status == {}  # no probes here: no data, not an error


def test_every_built_in_query_runs_on_a_live_server(stack, prometheus):
    provider = PrometheusProvider(prometheus.url, VARIANTS, "baseline")
    for variant in VARIANTS:
        for name in QUERIES:
            answer = prometheus.query(provider.promql(name, variant))
            assert answer["status"] == "success", (name, answer)


def test_no_data_is_no_entry_and_a_bad_query_is_an_error_naming_it(stack, prometheus):
    nobody = PrometheusProvider(prometheus.url, ["nobody", "baseline"], fallback="baseline")
    seen = asyncio.run(nobody.observe())
    assert seen.error is None
    assert {key.variant for key in seen.counters} == {"baseline"}

    broken = PrometheusProvider(prometheus.url, VARIANTS, "baseline", queries={"failed": "rate(x[1m]"})
    error = asyncio.run(broken.observe()).error
    assert "'failed'" in error
    assert "bad_data" in error


def test_prometheus_down_is_an_error_naming_the_query():
    down = PrometheusProvider(f"http://127.0.0.1:{free_port()}", VARIANTS, "baseline", timeout=1.0)
    seen = asyncio.run(down.observe())
    assert seen.counters == {}
    assert "prometheus query 'attempts' for baseline" in seen.error
    assert "ConnectError" in seen.error


def all_requests(seen: Observations, variant: str, probed: bool = False) -> dict[str, float]:
    """Source -> value of `variant`'s TTFT series of all requests (the +Inf buckets): its servers'
    (`probed`: its probes', in their own stratum)."""
    return {
        key.source: value
        for key, value in seen.counters.items()
        if (key.variant, key.signal, key.le) == (variant, TTFT, math.inf)
        and (segment_of(key.stratum) == PROBED) == probed
    }


def test_ttft_weight_status_windows_and_a_restart_from_real_model_servers_and_probes(
    tmp_path, prometheus_binary
):
    """Envoy sees no first token: TTFT comes from the model servers' histogram, weight status from the
    probes and effective windows from the model servers' info series, all scraped by Prometheus. The
    probes' synthetic requests keep the TTFT series moving. A restarted server's series keep their
    names and fall (and are gone while it is down: Prometheus marks them stale)."""
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

        def observe() -> Observations:
            seen = asyncio.run(provider.observe())
            assert seen.error is None, seen.error
            return seen

        def measured() -> Observations | None:
            seen = observe()
            answered = all(sum(all_requests(seen, v).values()) >= 3 for v in VARIANTS)
            reported = len(seen.weight_status) == len(seen.effective_windows) == 2
            return seen if reported and answered else None

        seen = wait_until(measured, 30, "TTFT, weight status and windows of both variants")
        assert seen.weight_status == {"baseline": ["ACTIVE"], "zero-layer": ["ERASED"]}
        assert seen.effective_windows == {"baseline": [ModelConfig().max_seq_len], "zero-layer": [0]}
        for variant, server in servers.items():
            pod = f'instance="127.0.0.1:{server.port}",job="server-{variant}"'
            assert all(pod in source for source in all_requests(seen, variant))
            probe = f'instance="127.0.0.1:{probes[variant]}",job="probe-{variant}"'
            assert all(probe in source for source in all_requests(seen, variant, probed=True))
            assert any(
                (k.variant, k.signal) == (variant, TTFT_SUM) and v > 0 for k, v in seen.counters.items()
            )
        assert {key.signal for key in seen.counters} >= {TTFT, TTFT_SUM}
        assert not {REQUESTS, ERRORS} & {key.signal for key in seen.counters}  # Envoy's: not scraped here

        before = wait_until(
            lambda: (found := all_requests(observe(), "zero-layer")) and sum(found.values()) >= 10 and found,
            30,
            "ten probe requests to zero-layer",
        )
        servers["zero-layer"].process.stop()
        wait_until(
            lambda: not all_requests(observe(), "zero-layer"), 15, "the stopped server's series gone stale"
        )
        restarted = start_model_server(
            "zero-layer", "zero-layer", weights["zero-layer"], logs, port=servers["zero-layer"].port
        )
        processes.append(restarted.process)
        wait_ready(restarted)
        after = wait_until(
            lambda: all_requests(observe(), "zero-layer") or None, 15, "the restarted server's series"
        )
        assert after.keys() <= before.keys()  # the same series, by name
        assert sum(after.values()) < sum(before.values())  # fallen: the consumer's reset
    finally:
        for process in processes:
            process.stop()
        assert not any(process.alive() for process in processes)
