"""Every dashboard query against a real Prometheus scraping the real local stack: the gateway, Envoy, both
model servers and their probes (graystack.local.rollout_stack). No Grafana server runs here, so the test
does what Grafana would: it lists each template variable's values from Prometheus, substitutes them
(`$namespace` -> its "All", `.*`: the local series have no namespace; `$rollout`, `$variant` -> the union
of their values) and `$__rate_interval`, `$__interval`, then asks for each panel's and annotation's range.

The stack is made to produce what the panels show: client traffic on both variants (half of it in the
`high_load` header segment), prompts of several lengths, a shadow stage whose greedy answers zero-layer
compares with the baseline's (its bias layer erased, it answers every one differently, so the guard,
asked for 90 % agreement, rolls it back), the agreement check dropped and a fault in zero-layer that the
controller rolls back on its shadow copies, a clean retry that leaves shadow and promotes, an even-split
experiment until its latency differences are measured, and a spec file the gateway refuses. Every query must parse and return at least one number (the counters the
gateway starts at 0, such as the NACKs that the local Envoy never sends, return zeros).

The capacity gauges (pods per variant, their cost per hour) come only from a gateway in Kubernetes with
rollout.capacity enabled: tests/support/capacity_exporter.py exports the gateway's own gauges beside the
stack, in a process of its own, set to a fleet mid-step (zero-layer short of the pods it wants).

Each /metrics endpoint must also pass `promtool check metrics`: ours strictly, Envoy's with its known
lint (names and help text that Envoy chooses, reported, not asserted away).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from graystack.local.gateway_stack import VARIANTS
from graystack.local.processes import free_port, start_process, wait_until
from graystack.local.rollout_stack import RolloutStack, Traffic, body
from graystack.observability import dashboards
from graystack.observability.files import ALERTS_FILE
from tests.integration.test_rollout_e2e import ROLLOUT, SHADOW
from tests.support import capacity_exporter
from tests.support.network import host_env, module_argv
from tests.support.processes import require_binary
from tests.support.prometheus import PrometheusServer, start_prometheus
from tests.support.stacks import gateway_metric, running, write_raw_spec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RATE_INTERVAL = "5s"  # Grafana's $__rate_interval at a 1 s scrape interval is 4 s; one more for jitter
STEP = "1s"
PROMPTS = ("Hi", "x" * 300, "x" * 600)  # three prompt_bucket ranges: 0-128, 129-512, 513-2048
# Rolled back in shadow twice, on disagreement and then on the fault (mirrored copies fail); with the
# agreement check dropped and the fault healed, the retry goes shadow, 20 %, 100 %.
SHADOW_FIRST = ROLLOUT | {"strategy": ROLLOUT["strategy"] | {"shadow": SHADOW}}
MIN_AGREEMENT = 0.9
LONG_SHADOW = SHADOW | {"duration": "60s"}
EXPERIMENT = {"experiment": {"weights": {"baseline": 50, "zero-layer": 50}, "duration": "1h"}}
# every answer captured and its structure checked: the Experiment row's quality panel has a difference
EXPERIMENT_ANALYSIS = SHADOW_FIRST["analysis"] | {"quality": {"capture_percent": 100, "structure": True}}
COMPARED = SHADOW_FIRST | {"analysis": SHADOW_FIRST["analysis"] | {"min_shadow_agreement": MIN_AGREEMENT}}
# Envoy's exposition as Envoy writes it: no HELP lines, counters without `_total`, its own unit names.
ENVOY_LINT = re.compile(
    r'^\S+ (no help text|counter metrics should have "_total" suffix|non-counter metrics should not have '
    r'"_total" suffix|non-histogram and non-summary metrics should not have "_count" suffix|metric names '
    r'should not contain abbreviated units|use base unit "seconds" instead of "\w+")$'
)
# DESIGN.md has the model server export vLLM's gauge names for load-aware routers; promtool reserves
# colons for recording rules.
VLLM_NAME = re.compile(r"^vllm:\w+ metric names should not contain ':'$")


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    return require_binary("prometheus", "Debian's prometheus package", provided_by="make prometheus")


@pytest.fixture(scope="module")
def promtool_binary() -> str:
    return require_binary("promtool", "lints each /metrics endpoint", provided_by="make prometheus")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, envoy_binary, prometheus_binary):
    yield from running(RolloutStack(tmp_path_factory.mktemp("stack"), envoy_binary, COMPARED, error_rate=0.0))


@pytest.fixture(scope="module")
def capacity(tmp_path_factory):
    """The capacity gauges' /metrics URL (tests/support/capacity_exporter.py), stopped by PID."""
    port = free_port()
    argv = module_argv("tests.support.capacity_exporter", "--port", str(port))
    process = start_process("capacity", argv, tmp_path_factory.mktemp("capacity"), env=host_env())
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        process.wait_healthy(lambda: httpx.get(url, timeout=2).status_code == 200, 30, "the capacity gauges")
        yield url
    finally:
        process.stop()
        assert not process.alive(), f"capacity exporter (pid {process.pid}) left running"


def endpoints(stack: RolloutStack, capacity: str) -> dict[str, str]:
    """Prometheus job -> the URL it scrapes."""
    found = {
        "envoy": f"http://127.0.0.1:{stack.ports['envoy_admin']}/stats/prometheus",
        "gateway": f"{stack.admin_url}/metrics",
        "gateway-capacity": capacity,
    }
    for variant in VARIANTS:
        found[f"server-{variant}"] = f"{stack.server_url(variant)}/metrics"
        found[f"probe-{variant}"] = f"http://127.0.0.1:{stack.probes[variant][1]}/metrics"
    return found


@pytest.fixture(scope="module")
def prometheus(stack, capacity, tmp_path_factory, prometheus_binary):
    targets = {
        job: (httpx.URL(url).netloc.decode(), httpx.URL(url).path)
        for job, url in endpoints(stack, capacity).items()
    }
    workdir = tmp_path_factory.mktemp("prometheus")
    server = start_prometheus(prometheus_binary, workdir, targets, rule_files=[ROOT / ALERTS_FILE])
    try:
        wait_until(lambda: len(instant(server, "up == 1")) == len(targets), 30, "every target scraped")
        yield server
    finally:
        server.stop()
        assert not server.process.alive(), f"prometheus (pid {server.process.pid}) left running"


def instant(server: PrometheusServer, promql: str) -> list[dict]:
    answer = server.query(promql)
    assert answer["status"] == "success", (promql, answer)
    return answer["data"]["result"]


class LongPrompts:
    """Prompts of every length in PROMPTS, straight to each model server, one round a second: TTFT per
    prompt-length bucket needs a steady stream, as rate() needs two samples that differ."""

    def __init__(self, stack: RolloutStack) -> None:
        self.urls = [f"{stack.server_url(v)}/v1/messages" for v in VARIANTS]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LongPrompts:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.wait(1.0):
                for url, prompt in itertools.product(self.urls, PROMPTS):
                    message = {"role": "user", "content": prompt}
                    client.post(url, json={"model": "tiny", "max_tokens": 4, "messages": [message]})


def apply_spec(stack: RolloutStack, changes: dict) -> None:
    applied = gateway_metric(stack, "graystack_spec_reloads_total", {"result": "applied"})
    stack.write_spec(stack.spec | changes)
    wait_until(
        lambda: gateway_metric(stack, "graystack_spec_reloads_total", {"result": "applied"}) > applied,
        30,
        "the rewritten spec applied",
    )


def wait_scraped(prometheus: PrometheusServer, phase: str) -> None:
    """Prometheus has sampled `phase`: a phase that lasts less than a scrape interval leaves no mark."""
    now = f'graystack_rollout_phase{{phase="{phase}"}} == 1'
    wait_until(lambda: instant(prometheus, now), 30, f"a scrape of the {phase} phase")


def wait_rolled_back(stack: RolloutStack, why: str) -> None:
    wait_until(
        lambda: (r := stack.rollout())["phase"] == "rolled_back" and not r["rollback_in_flight"],
        60,
        f"the guard to roll zero-layer back ({why})",
        interval=0.2,
    )


@pytest.fixture(scope="module")
def history(stack, prometheus) -> tuple[float, float]:
    """Cause what the panels show; the (start, end) Unix times Prometheus holds it in."""
    started = time.time()
    streamed = [{**body(), "stream": True, "max_tokens": 4}]  # time per output token needs streams
    with (
        Traffic(stack.client.base_url, rate=40),
        Traffic(stack.client.base_url, rate=4, clients=2, bodies=streamed),
        LongPrompts(stack),
    ):
        wait_rolled_back(stack, "its greedy answers differ from the baseline's")
        wait_scraped(prometheus, "rolled_back")  # the annotations mark each phase Prometheus saw
        # No agreement check, and a shadow stage that lasts until the fault (set once Prometheus has
        # seen the stage) rolls it back.
        apply_spec(stack, SHADOW_FIRST | {"strategy": SHADOW_FIRST["strategy"] | {"shadow": LONG_SHADOW}})
        stack.cli("retry")
        wait_scraped(prometheus, "shadow")
        stack.set_fault(0.05)
        wait_rolled_back(stack, "the fault in its shadow copies")
        wait_scraped(prometheus, "rolled_back")
        # The shadow phase is short: the fault stays (the long prompts meet it) until Prometheus has
        # seen enough 5xx for the error-rate alert to be pending.
        pending = 'ALERTS{alertname="GraystackVariantErrorRateHigh", variant="zero-layer"}'
        wait_until(lambda: instant(prometheus, pending), 90, "zero-layer's error-rate alert pending")
        stack.clear_fault()
        apply_spec(stack, SHADOW_FIRST)
        stack.cli("retry")
        # bounded for a machine half as fast (or a suite run side by side): the evidence sets the pace
        wait_until(lambda: stack.rollout()["phase"] == "promoted", 240, "the clean retry to promote")
        # An even-split experiment on the same traffic, until Prometheus holds each kind of difference
        # (latency needs answers measured on both variants; no header rule, since with one Envoy's error
        # counts mix the segments and the error rate is not compared): the Experiment row reads them.
        randomised = stack.spec["routing"] | {"rules": []}
        changes = {"strategy": EXPERIMENT, "analysis": EXPERIMENT_ANALYSIS, "routing": randomised}
        apply_spec(stack, SHADOW_FIRST | changes)
        for difference in ("error_rate", "ttft_p50", "structure_failures"):
            measured = f'graystack_experiment_difference{{difference="{difference}", side="lower"}}'
            wait_until(
                lambda q=measured: instant(prometheus, q), 60, f"a scrape of the experiment's {difference}"
            )
    write_raw_spec(stack, "name: [not a spec")
    refused = 'graystack_spec_reloads_total{result="refused"} >= 1'
    wait_until(lambda: instant(prometheus, refused), 30, "a scrape of the refused spec reload")
    time.sleep(3)  # a few more scrapes, so the last rates cover the end
    return started, time.time()


def variable_values(server: PrometheusServer, query: str) -> list[str]:
    """What Grafana lists for `label_values(<series>, <label>)`, from Prometheus' label API."""
    series, label = re.fullmatch(r"label_values\((.+), (\w+)\)", query).groups()
    answer = httpx.get(
        f"{server.url}/api/v1/label/{label}/values", params={"match[]": series}, timeout=5
    ).json()
    assert answer["status"] == "success", (query, answer)
    return answer["data"]


def substituted(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", STEP)
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), expr)


def grafana_escape(value: str) -> str:
    """A value in a multi-value regex, escaped as Grafana's Prometheus data source does (for a string
    literal: each regex metacharacter gets a doubled backslash)."""
    return re.sub(r"[\\^$*+?.()|\[\]{}]", lambda m: "\\\\" + m.group(0), value)


def grafana_values(server: PrometheusServer, board: dict) -> dict[str, str]:
    """Each variable at "All", in order (a variable's query may use the ones before it)."""
    values: dict[str, str] = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        listed = variable_values(server, substituted(variable["query"], values))
        union = "(" + "|".join(map(grafana_escape, listed)) + ")"
        values[variable["name"]] = variable.get("allValue") or union
    return values


def range_series(server: PrometheusServer, promql: str, span: tuple[float, float]) -> list[dict]:
    """The range query's series; AssertionError with Prometheus' message if it does not parse."""
    params = {"query": promql, "start": span[0], "end": span[1], "step": STEP}
    answer = httpx.get(f"{server.url}/api/v1/query_range", params=params, timeout=10).json()
    assert answer["status"] == "success", f"{promql}: {answer.get('error')}"
    return answer["data"]["result"]


def numbers(series: list[dict]) -> list[float]:
    return [float(v) for s in series for _, v in s["values"] if not math.isnan(float(v))]


def test_the_variables_list_what_the_stack_runs(prometheus, history):
    board = json.loads(dashboards.render("variants"))
    by_name = {v["name"]: v["query"] for v in board["templating"]["list"] if v["type"] == "query"}
    assert variable_values(prometheus, by_name["namespace"]) == []  # no namespace here: "All" is `.*`
    assert variable_values(prometheus, by_name["rollout"].replace("$namespace", ".*")) == ["zero-layer"]
    variants = by_name["variant"].replace("$namespace", ".*").replace("$rollout", "zero-layer")
    assert sorted(variable_values(prometheus, variants)) == sorted(VARIANTS)


@pytest.mark.parametrize("name", list(dashboards.DASHBOARDS))
def test_every_query_parses_and_returns_data(prometheus, history, name):
    board = json.loads(dashboards.render(name))
    values = grafana_values(prometheus, board)
    empty = [
        f"{where}: {substituted(expr, values)}"
        for where, expr in dashboards.queries(board)
        if not numbers(range_series(prometheus, substituted(expr, values), history))
    ]
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_the_panels_show_the_events_that_happened(prometheus, history):
    """What a user came to see is there: two rollbacks and one promotion marked, the rollbacks' reasons,
    zero-layer's shadow answers compared (all differing: its agreement stays under the check's floor,
    drawn at 90 %), the high_load segment's own split, zero-layer's shadow copies, its injected 500s,
    TTFT in three prompt-length buckets, both servers' memory, the erased bias layer, the refused spec,
    every NACK counter at 0, each variant's pods as the capacity gauges hold them."""
    wanted = {
        ("rollout-decisions", "annotation Rollbacks"): lambda s: len(numbers(s)) == 2,
        ("rollout-decisions", "annotation Promotions"): lambda s: len(numbers(s)) == 1,
        ("rollout-decisions", "Rollbacks by reason [A]"): lambda s: (
            {x["metric"]["reason"] for x in s if max(numbers([x])) > 0} == {"shadow_agreement", "error_rate"}
        ),
        ("rollout-decisions", "Shadow agreement [A]"): lambda s: (
            {x["metric"]["variant"] for x in s} == {"zero-layer"}
            and max(numbers(s), default=1) < MIN_AGREEMENT
        ),
        ("rollout-decisions", "Shadow agreement [B]"): lambda s: (
            {x["metric"]["result"] for x in s} == {"agree", "differ", "missing"}
            and any(x["metric"]["result"] == "differ" and max(numbers([x])) > 0 for x in s)
        ),
        ("rollout-decisions", "Check shadow_agreement: value and threshold [B]"): lambda s: (
            set(numbers(s)) == {MIN_AGREEMENT}
        ),
        ("rollout-decisions", "Weight per segment and variant [A]"): lambda s: (
            {x["metric"]["segment"] for x in s} >= {"default", "high_load"}
            and any(x["metric"]["segment"] == "high_load" and max(numbers([x])) == 100 for x in s)
        ),
        ("variants", "Shadow copies (Envoy) [A]"): lambda s: (
            all(x["metric"]["envoy_cluster_name"].endswith("-shadow") for x in s)
            and any(
                x["metric"]["envoy_cluster_name"] == "zero-layer-shadow" and max(numbers([x]), default=0) > 0
                for x in s
            )
        ),
        ("variants", "Memory: process RSS and KV-cache usage [A]"): lambda s: (
            {x["metric"]["variant"] for x in s if min(numbers([x]), default=0) > 0} == set(VARIANTS)
        ),
        ("control-plane", "NACKs by type (gateway) [A]"): lambda s: (
            {x["metric"]["type"] for x in s} == {"cds", "eds", "lds", "rds"} and set(numbers(s)) == {0}
        ),
        ("variants", "Error rate by code (model servers) [A]"): lambda s: (
            # the injected fault and no other server error (a 499 may show: an attempt Envoy gave up on)
            {(x["metric"]["variant"], x["metric"]["code"]) for x in s if x["metric"]["code"] >= "500"}
            == {("zero-layer", "500")}
        ),
        ("variants", "TTFT p95 by prompt length [A]"): lambda s: (
            {x["metric"]["prompt_bucket"] for x in s if numbers([x])} >= {"0-128", "129-512", "513-2048"}
        ),
        ("probes", "Weight status per pod [A]"): lambda s: (
            {(x["metric"]["variant"], x["metric"]["status"]) for x in s}
            == {("baseline", "ACTIVE"), ("zero-layer", "ERASED")}
        ),
        ("control-plane", "Spec reloads by result [A]"): lambda s: (
            "refused" in {x["metric"]["result"] for x in s}
        ),
        ("variants", "Pods per variant: wanted, running, ready [A]"): lambda s: (
            {(x["metric"]["variant"], x["metric"]["state"]): set(numbers([x])) for x in s}
            == {
                (variant, state): {count}
                for variant, states in capacity_exporter.REPLICAS.items()
                for state, count in states.items()
            }
        ),
    }
    for (name, where), holds in wanted.items():
        board = json.loads(dashboards.render(name))
        values = grafana_values(prometheus, board)
        expr = dict(dashboards.queries(board))[where]
        series = range_series(prometheus, substituted(expr, values), history)
        assert holds(series), f"{name}: {where}: {series}"


def test_the_cost_panel_prices_the_output_tokens_the_gateway_measured(prometheus, history):
    """Each variant's cost per million output tokens is its pods' cost per hour over the output tokens
    per second that the Tokens per second panel draws from the gateway's measurement, times 3600, at
    every step both have."""
    board = json.loads(dashboards.render("variants"))
    values = grafana_values(prometheus, board)
    drawn = dict(dashboards.queries(board))

    def by_variant(where: str) -> dict[str, dict[float, float]]:
        series = range_series(prometheus, substituted(drawn[where], values), history)
        return {x["metric"]["variant"]: {t: float(v) for t, v in x["values"]} for x in series}

    cost = by_variant("Cost per million output tokens [A]")
    generated = by_variant("Tokens per second [B]")
    assert set(cost) == set(capacity_exporter.REPLICAS)
    for variant, points in cost.items():
        pods = capacity_exporter.REPLICAS[variant]["running"]
        per_hour = pods * capacity_exporter.GPUS_PER_POD * capacity_exporter.GPU_HOUR_PRICE
        both = points.keys() & generated[variant].keys()
        assert len(both) > 10, variant
        for t in both:
            assert points[t] == pytest.approx(per_hour / (generated[variant][t] * 3600) * 1e6), (variant, t)


def lint(promtool: str, text: str) -> list[str]:
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return [line for line in (checked.stdout + checked.stderr).splitlines() if line.strip()]


def test_promtool_check_metrics_on_every_endpoint(stack, capacity, history, promtool_binary):
    complaints = {
        job: lint(promtool_binary, httpx.get(url, timeout=5).text)
        for job, url in endpoints(stack, capacity).items()
    }
    envoy = complaints.pop("envoy")
    assert envoy, "Envoy's known lint disappeared: drop ENVOY_LINT"
    assert [line for line in envoy if not ENVOY_LINT.match(line)] == []  # lint only, no parse error
    print(f"Envoy /stats/prometheus: {len(envoy)} known lint complaints (Envoy's names and help text)")
    for job, lines in complaints.items():
        allowed = VLLM_NAME if job.startswith("server-") else None
        assert [line for line in lines if not (allowed and allowed.match(line))] == [], job


def alerts_seen(server: PrometheusServer, span: tuple[float, float]) -> dict[tuple[str, str], set[str]]:
    """(alert, variant or rollout) -> the states (pending, firing) Prometheus' ALERTS series held."""
    seen: dict[tuple[str, str], set[str]] = {}
    for series in range_series(server, "ALERTS", span):
        labels = series["metric"]
        key = (labels["alertname"], labels.get("variant") or labels.get("rollout", ""))
        seen.setdefault(key, set()).add(labels["alertstate"])
    return seen


def test_the_alert_rules_evaluate_on_the_live_series(prometheus, history):
    """Prometheus evaluates every rule against the stack without error; the rollback pages, zero-layer's
    injected 5xx put its error-rate alert in `pending` (its 5 minutes never pass here), so does its
    shortfall of pods against its capacity plan (15 minutes), and the pods' expected weight status, the
    connected Envoy and the shadow comparisons (each finds the baseline's answer) page nothing."""
    rules = httpx.get(f"{prometheus.url}/api/v1/rules", timeout=5).json()["data"]["groups"]
    health = {r["name"]: (r["health"], r.get("lastError", "")) for g in rules for r in g["rules"]}
    assert len(health) == sum(
        len(g["rules"]) for g in yaml.safe_load((ROOT / ALERTS_FILE).read_text())["groups"]
    )
    assert {name for name, (state, _) in health.items() if state != "ok"} == set(), health
    seen = alerts_seen(prometheus, history)
    assert seen[("GraystackRolloutRolledBack", "zero-layer")] == {"firing"}
    assert "pending" in seen[("GraystackVariantErrorRateHigh", "zero-layer")]
    # zero-layer short of the pods it wants (its 15 minutes never pass here), the baseline not
    assert seen[("GraystackCapacityNotReady", "zero-layer")] == {"pending"}
    assert ("GraystackCapacityNotReady", "baseline") not in seen
    assert not {
        key
        for key in seen
        if key[0]
        in {
            "GraystackZeroLayerWeightStatusUnexpected",
            "GraystackNoConnectedProxies",
            "GraystackShadowComparisonsMissing",
        }
    }
