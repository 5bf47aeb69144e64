"""The Variants dashboard's cost panel computes what it says for known inputs: its committed query, with
Grafana's variables filled in, run by Prometheus' own engine (promtool's PromQL unit tests) on series
that the gateway's capacity gauges and its measurement of every answer's tokens would hold."""

from __future__ import annotations

import json
import subprocess

import yaml

from graystack.observability import dashboards
from tests.support.processes import require_binary

GPU_HOUR_PRICE = 4.0  # one GPU per pod
# variant -> (running pods, output tokens per second measured by two gateway replicas, as proxies spread)
FLEET = {"baseline": (2, 1000, 0), "zero-layer": (3, 200, 300), "idle": (1, 0, 0)}


def panel_query(title: str) -> str:
    """The panel's query as Grafana sends it, every variable at "All" over the variants above."""
    board = json.loads(dashboards.render("variants"))
    expr = dict(dashboards.queries(board))[f"{title} [A]"]
    values = {"$namespace": ".*", "$rollout": "zero-layer", "$variant": "|".join(FLEET)}
    for variable, value in values.items():
        expr = expr.replace(variable, value)
    return expr.replace("$__rate_interval", "5m")


def input_series() -> list[dict]:
    """Ten minutes at one sample a minute: the cost gauge as the gateway sets it, the output tokens each
    gateway replica measured growing at their rate, and the input tokens, which the panel must leave
    out."""
    found = []
    for variant, (pods, first, second) in FLEET.items():
        cost = pods * GPU_HOUR_PRICE
        found.append(
            {
                "series": f'graystack_variant_cost_per_hour{{rollout="zero-layer", variant="{variant}"}}',
                "values": f"{cost}x10",
            }
        )
        usage = "gen_ai_client_token_usage_sum"
        counters = {
            f'{usage}{{variant="{variant}", segment="default", gen_ai_token_type="output", instance="gw-1"}}': first,
            f'{usage}{{variant="{variant}", segment="default", gen_ai_token_type="output", instance="gw-2"}}': second,
            f'{usage}{{variant="{variant}", segment="default", gen_ai_token_type="input", instance="gw-1"}}': 5
            * first,
        }
        found += [{"series": name, "values": f"0+{rate * 60}x10"} for name, rate in counters.items() if rate]
    return found


def test_the_cost_panel_prices_a_million_output_tokens(tmp_path):
    """baseline: 2 pods x 4.0/h over 1000 tokens/s (3.6 M/h) is 2.22 per million; zero-layer: 12.0/h over
    the 200/s and 300/s two gateway replicas measured is 6.67; an idle variant has no line."""
    expected = {"baseline": 2.22, "zero-layer": 6.67}
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(),
                "promql_expr_test": [
                    {
                        "expr": f"round({panel_query('Cost per million output tokens')}, 0.01)",
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": f'{{variant="{variant}"}}', "value": cost}
                            for variant, cost in expected.items()
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "cost_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    binary = require_binary("promtool", "runs the panel's query", provided_by="make prometheus")
    tested = subprocess.run([binary, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
