"""The pure parts of Kubernetes mode: EndpointSlices to Envoy endpoints, a flip written into spec text
(and `graystack weight --configmap` writing it, against a stand-in API server), and the stored rollout
state's format (the file store's, so a rollout moves between modes by a copy)."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from gateway.kubernetes import api, weight
from gateway.kubernetes.endpoints import EndpointSlices, ready_addresses
from gateway.kubernetes.spec_source import spec_from_configmap
from gateway.kubernetes.state import decode_state
from gateway.kubernetes.weight import flipped
from gateway.rollout.machine import initial_state
from gateway.rollout.state_store import load_state, save_state
from gateway.spec.model import SpecError, parse_spec
from graystack.cli import main

SPEC = """\
name: zero-layer
variants:
  baseline: {service: gs-baseline, port: 8000}
  zero-layer: {service: gs-zero-layer, port: 8000}
routing:
  header: X-Client-Type
  rules:
    - {value: high_load, variant: zero-layer}
  weights: {baseline: 95, zero-layer: 5}
retries: {"on": "5xx", attempts: 1, fallback: baseline}
"""


def piece(service: str, *endpoints: tuple[str, bool | None]) -> dict:
    return {
        "metadata": {"name": f"{service}-abc", "labels": {"kubernetes.io/service-name": service}},
        "endpoints": [
            {"addresses": [ip], **({} if ready is None else {"conditions": {"ready": ready}})}
            for ip, ready in endpoints
        ],
    }


def test_only_ready_pods_become_endpoints_at_the_variant_port() -> None:
    slices = EndpointSlices()
    changed = slices.update(
        {
            "a": piece("gs-baseline", ("10.0.0.2", True), ("10.0.0.3", False), ("10.0.0.1", None)),
            "b": piece("gs-zero-layer", ("10.0.1.1", False)),
            "c": {"metadata": {"name": "unlabelled"}, "endpoints": [{"addresses": ["10.9.9.9"]}]},
        }
    )
    assert changed
    endpoints = slices.endpoints_for(parse_spec(SPEC))
    assert endpoints == {"baseline": [("10.0.0.1", 8000), ("10.0.0.2", 8000)], "zero-layer": []}


def test_an_unchanged_set_of_slices_is_not_a_change() -> None:
    slices = EndpointSlices()
    assert slices.update({"a": piece("gs-baseline", ("10.0.0.1", True))})
    assert not slices.update({"a": piece("gs-baseline", ("10.0.0.1", True))})
    assert ready_addresses({"a": piece("gs-baseline", ("10.0.0.1", True)), "b": piece("gs-baseline")}) == {
        "gs-baseline": ["10.0.0.1"]
    }


def test_a_flip_rewrites_the_default_split_or_one_segment() -> None:
    default = yaml.safe_load(flipped(SPEC, {"zero-layer": 20}, None, "cm"))
    assert default["routing"]["weights"] == {"baseline": 80, "zero-layer": 20}
    segment = parse_spec(flipped(SPEC, {"baseline": 100}, "high_load", "cm"))
    assert segment.routing.rules[0].weights == {"baseline": 100, "zero-layer": 0}
    assert segment.retries.on == "5xx"  # the YAML 1.1 boolean trap: `on` stays a key


@pytest.mark.parametrize(
    ("weights", "segment", "message"),
    [
        ({"zero-layer": 120}, None, "less than or equal to 100"),
        ({"canary": 5}, None, "unknown variant"),
        ({"zero-layer": 5}, "tablet", "no rule for X-Client-Type: tablet"),
    ],
)
def test_a_bad_flip_is_refused_before_anything_is_written(weights, segment, message) -> None:
    with pytest.raises(SpecError, match=message):
        flipped(SPEC, weights, segment, "cm")


class ConfigMap:
    """One ConfigMap as the API server answers `CoreV1Api`'s raw calls (`_preload_content=False`)."""

    def __init__(self, name: str, namespace: str, data: dict[str, str]) -> None:
        self.object = {"metadata": {"name": name, "namespace": namespace}, "data": data}

    def read_namespaced_config_map(self, name: str, namespace: str, **_: object) -> SimpleNamespace:
        return SimpleNamespace(data=json.dumps(self.object).encode())

    def replace_namespaced_config_map(
        self, name: str, namespace: str, body: dict, **_: object
    ) -> SimpleNamespace:
        self.object = body
        return self.read_namespaced_config_map(name, namespace)


def test_a_flip_in_the_cluster_keeps_a_judge_prompt_that_only_the_gateway_has(monkeypatch, tmp_path) -> None:
    """The prompt file lives in the gateway's pod: the operator's machine validates the spec without it."""
    prompt = str(tmp_path / "only-in-the-gateway-pod" / "judge.txt")
    judged = (
        SPEC
        + f"analysis:\n  quality:\n    judge: {{url: 'http://judge:8000/v1', model: j, prompt: '{prompt}'}}\n"
    )
    stored = ConfigMap("gs-spec", "llm", {"spec.yaml": judged})
    monkeypatch.setattr(api, "api_client", lambda *_: contextlib.nullcontext())
    monkeypatch.setattr(weight.client, "CoreV1Api", lambda _: stored)
    result = CliRunner().invoke(
        main, ["weight", "zero-layer=20", "--configmap", "gs-spec", "--namespace", "llm"]
    )
    assert result.exit_code == 0, result.output
    assert "written to configmap/llm/gs-spec" in result.output
    written = yaml.safe_load(stored.object["data"]["spec.yaml"])
    assert written["routing"]["weights"] == {"baseline": 80, "zero-layer": 20}
    assert written["analysis"]["quality"]["judge"]["prompt"] == prompt


def test_a_configmap_without_the_key_or_with_a_bad_spec_names_itself() -> None:
    meta = {"name": "gs-spec", "namespace": "llm"}
    with pytest.raises(
        SpecError, match=r"configmap/llm/gs-spec\[spec.yaml\]: the ConfigMap has no `spec.yaml`"
    ):
        spec_from_configmap({"metadata": meta, "data": {}})
    with pytest.raises(SpecError, match=r"configmap/llm/gs-spec\[spec.yaml\]"):
        spec_from_configmap({"metadata": meta, "data": {"spec.yaml": "name: [x"}})


def test_the_stored_state_is_the_file_store_format(tmp_path) -> None:
    state = initial_state(parse_spec(SPEC), 1000.0)
    path = tmp_path / "state.json"
    save_state(path, state)
    assert decode_state(path.read_text()) == state == load_state(path)
    with pytest.raises(ValueError, match="format version"):
        decode_state('{"version": 99, "state": {}}')
    with pytest.raises(ValueError, match="not a rollout state"):
        decode_state('{"version": 1}')
