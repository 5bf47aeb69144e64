"""The rollout spec refuses bad edits with a message naming the field (the last good spec stays live)."""

import pytest

from gateway.spec.fields import parse_duration
from gateway.spec.model import (
    SpecError,
    complete_split,
    load_yaml,
    parse_spec,
    validate_spec,
)

DESIGN_EXAMPLE = """
name: zero-layer
variants:
  baseline:   {endpoints: ["127.0.0.1:8001"]}
  zero-layer: {endpoints: ["127.0.0.1:8002"]}
routing:
  header: X-Client-Type
  rules:
    - {value: high_load, variant: zero-layer}
    - {value: mobile, weights: {baseline: 80, zero-layer: 20}}
  weights: {baseline: 95, zero-layer: 5}
timeouts: {request: 8s, first_byte: 2s}
retries: {on: "5xx,reset,connect-failure", attempts: 1, fallback: baseline}
strategy:
  shadow: {percent: 100, duration: 5m, gate: {success_rate: 0.995, max_latency_ratio: 0.5}}
  steps: [{weight: 5, hold: 10m}, {weight: 20, hold: 30m}, {weight: 100}]
analysis:
  interval: 5s
  window: 60s
  min_requests: 100
  max_error_rate: 0.003
  max_latency_ratio: 1.5
  max_ttft_p95: 2s
  expected_weight_status: [ERASED, ZEROED]
  provider: {type: direct}
"""


def example(**changes) -> dict:
    data = load_yaml(DESIGN_EXAMPLE)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = data
        for part in path:
            node = node[part]
        node[last] = value
    return data


def test_the_design_example_is_a_valid_spec():
    spec = parse_spec(DESIGN_EXAMPLE)
    assert spec.routing.weights == {"baseline": 95, "zero-layer": 5}
    assert spec.routing.segment("mobile") == {"baseline": 80, "zero-layer": 20}
    assert spec.routing.segment("high_load") == {"zero-layer": 100}
    assert spec.timeouts.request == 8.0
    assert spec.timeouts.first_byte == 2.0
    assert spec.strategy.steps[1].hold == 1800.0
    assert spec.variants["baseline"].endpoints == [("127.0.0.1", 8001)]


@pytest.mark.parametrize(
    ("data", "names"),
    [
        (
            example(routing__weights={"baseline": 90, "zero-layer": 5}),
            ["routing.weights", "sum to 100, got 95"],
        ),
        (
            example(routing__weights={"baseline": 95, "canary": 5}),
            ["routing.weights", "unknown variant", "canary"],
        ),
        (example(timeouts={"request": "-3s"}), ["timeouts.request", "negative"]),
        (example(timeouts={"request": "soon"}), ["timeouts.request", "not a duration"]),
        (example(retries={"fallback": "nope"}), ["retries.fallback", "nope"]),
        (
            example(envoy_picker={"host": "127.0.0.1", "port": 9002}),
            ["envoy_picker", "retries.fallback: null"],
        ),
        (
            example(
                envoy_picker={"host": "127.0.0.1", "port": 9002},
                retries={"fallback": None},
                endpoint_picker={"pool": "llm"},
            ),
            ["envoy_picker", "endpoint_picker"],
        ),
        (
            example(envoy_picker={"host": "127.0.0.1"}, retries={"fallback": None}),
            ["envoy_picker.port", "required"],
        ),
        (example(retries={"on": "5xx,sometimes"}), ["retries", "sometimes"]),
        (
            example(
                variants={
                    "baseline": {"endpoints": ["localhost:8001"]},
                    "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
                }
            ),
            ["variants.baseline.endpoints.0", "IP address"],
        ),
        (example(routing__header="X Client"), ["routing", "not a valid HTTP header name"]),
        (example(routing__wieghts={"baseline": 100}), ["routing.wieghts", "Extra inputs"]),
        (example(analysis__provider={"type": "prometheus"}), ["analysis.provider", "needs `url`"]),
        (
            example(routing__rules=[{"value": "a", "variant": "baseline", "weights": {"baseline": 100}}]),
            ["routing.rules.0", "either"],
        ),
        (
            example(routing__rules=[{"value": "a", "weights": {"baseline": 60, "zero-layer": 60}}]),
            ["routing.rules.0", "sum to 100"],
        ),
        (example(routing__mirror={"variant": "canary"}), ["routing.mirror.variant", "canary"]),
        (example(analysis={"window": "60s", "recent": "15s"}), ["analysis.recent", "Extra inputs"]),
        (
            example(analysis__min_detectable_error_rate=0.002),
            ["analysis", "min_detectable_error_rate (0.002) must be above max_error_rate (0.003)"],
        ),
        (example(analysis__false_rollback_budget=0), ["analysis.false_rollback_budget", "greater than 0"]),
        (example(analysis__false_rollback_budget=0.7), ["analysis.false_rollback_budget", "less than 0.5"]),
        (
            example(analysis__mean_time_between_false_alarms="10m"),
            ["analysis", "mean_time_between_false_alarms (600s) must span at least 1000 looks of 5s"],
        ),
        (example(analysis__max_error_ratio=0.5), ["analysis.max_error_ratio", "greater than or equal to 1"]),
        (example(analysis__max_latency_ratio=1.0), ["analysis.max_latency_ratio", "greater than 1"]),
        (
            example(analysis__on_shared_incident="page"),
            ["analysis.on_shared_incident", "'rollback' or 'hold'"],
        ),
        (example(routing__mirror={"variant": "zero-layer", "percent": 101}), ["routing.mirror.percent"]),
        (
            example(analysis__max_effective_window=-1),
            ["analysis.max_effective_window", "greater than or equal to 0"],
        ),
        (example(analysis__max_effective_window="wide"), ["analysis.max_effective_window", "integer"]),
        (example(analysis__max_effective_window=64.5), ["analysis.max_effective_window", "integer"]),
    ],
)
def test_a_bad_spec_is_refused_with_a_message_naming_the_field(data, names):
    with pytest.raises(SpecError) as refused:
        validate_spec(data)
    for name in names:
        assert name in str(refused.value)


def test_the_effective_window_bound_is_off_unless_set():
    assert parse_spec(DESIGN_EXAMPLE).analysis.max_effective_window is None
    bounded = validate_spec(example(analysis__max_effective_window=64))
    assert bounded.analysis.max_effective_window == 64
    assert validate_spec(example(analysis__max_effective_window=0)).analysis.max_effective_window == 0


def test_the_decision_budget_defaults_and_every_check_can_be_off():
    analysis = parse_spec(DESIGN_EXAMPLE).analysis
    assert analysis.false_rollback_budget == 0.01
    assert analysis.mean_time_between_false_alarms == 90 * 86400
    assert analysis.min_detectable_error_rate == 0.01
    assert analysis.on_shared_incident == "rollback"
    off = validate_spec(
        example(
            analysis__max_error_ratio=None,
            analysis__max_latency_ratio=None,
            analysis__max_ttft_p95=None,
            analysis__expected_weight_status=None,
        )
    ).analysis
    assert (off.max_error_ratio, off.max_latency_ratio, off.max_ttft_p95, off.expected_weight_status) == (
        (None,) * 4
    )


def test_looks_default_to_every_second_where_the_gateway_scrapes_itself():
    assert validate_spec(example(analysis__interval=None)).analysis.look_interval == 1.0
    prometheus = {"type": "prometheus", "url": "http://prometheus:9090"}
    assert (
        validate_spec(example(analysis__interval=None, analysis__provider=prometheus)).analysis.look_interval
        == 5
    )
    assert validate_spec(example(analysis__interval="2s")).analysis.look_interval == 2.0


def test_bad_yaml_is_refused_with_its_position():
    with pytest.raises(
        SpecError, match=r"spec.yaml: not valid YAML at line 3, column 1: expected .,. or .\]."
    ):
        parse_spec("name: x\nvariants: [unclosed\n", source="spec.yaml")


def test_a_spec_that_is_not_a_mapping_is_refused():
    with pytest.raises(SpecError, match="mapping"):
        parse_spec("- just\n- a list\n")


@pytest.mark.parametrize(
    ("text", "seconds"), [("8s", 8.0), ("500ms", 0.5), ("5m", 300.0), ("1h", 3600.0), (0, 0.0), ("2", 2.0)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_a_flip_names_one_variant_and_the_other_takes_the_rest():
    assert complete_split(["baseline", "zero-layer"], {"zero-layer": 20}) == {
        "baseline": 80,
        "zero-layer": 20,
    }
    with pytest.raises(SpecError, match="unknown variant"):
        complete_split(["baseline", "zero-layer"], {"canary": 20})


def test_a_segment_flip_replaces_only_that_segment():
    spec = parse_spec(DESIGN_EXAMPLE)
    flipped = spec.with_split({"baseline": 50, "zero-layer": 50}, "mobile")
    assert flipped.routing.segment("mobile") == {"baseline": 50, "zero-layer": 50}
    assert flipped.routing.weights == spec.routing.weights
    assert flipped.routing.segment("high_load") == {"zero-layer": 100}
    with pytest.raises(SpecError, match="no rule"):
        spec.with_split({"baseline": 100}, "tablet")
    with pytest.raises(SpecError, match="sum to 100"):
        spec.with_split({"baseline": 70, "zero-layer": 20})


def test_the_example_spec_in_the_repository_is_valid():
    from pathlib import Path

    from gateway.sources.spec_file import read_spec

    spec, _ = read_spec(Path(__file__).parents[2] / "examples" / "spec.yaml")
    assert spec.retries.fallback == "baseline"
    assert spec.timeouts.request == 0.0
