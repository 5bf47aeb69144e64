"""Answers placed by the endpoint that served them (gateway/gatewayapi/attribution.py): a Service's
addresses and an InferencePool's selected pods, ports dropped; the answers of a gateway that sends the
whole rule to one pool show it; a host no variant has, or none at all, is counted apart and named."""

from __future__ import annotations

import pytest

from gateway.gatewayapi.attribution import address, pool_addresses, served_by, variants_by_address
from gateway.rollout.sequential.split import Proof, SplitTest


def pod(name: str, ip: str, labels: dict, phase: str = "Running", namespace: str = "serving") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "status": {"phase": phase, "podIP": ip},
    }


POOL = {
    "metadata": {"name": "llm-v2", "namespace": "serving"},
    "spec": {"selector": {"matchLabels": {"app": "llm", "version": "v2"}}, "targetPorts": [{"number": 8000}]},
}


def test_a_pool_is_the_running_pods_it_selects_in_its_namespace():
    pods = [
        pod("a", "10.0.0.1", {"app": "llm", "version": "v2"}),
        pod("b", "10.0.0.2", {"app": "llm", "version": "v2", "extra": "yes"}),
        pod("c", "10.0.0.3", {"app": "llm", "version": "v1"}),
        pod("d", "10.0.0.4", {"app": "llm", "version": "v2"}, phase="Pending"),
        pod("e", "10.0.0.5", {"app": "llm", "version": "v2"}, namespace="other"),
    ]
    assert pool_addresses(POOL, pods) == ["10.0.0.1", "10.0.0.2"]


def test_hosts_are_placed_by_address_whatever_the_port():
    assert [address(h) for h in ("10.0.0.5:8000", "10.0.0.5", "[fd00::5]:8000")] == [
        "10.0.0.5",
        "10.0.0.5",
        "fd00::5",
    ]
    by = variants_by_address({"v1": ["10.0.0.1:8000"], "v2": ["10.0.0.2"]})
    placed, unplaced = served_by(["10.0.0.1:9000", "10.0.0.2:8000", None, "10.9.9.9:8000"], by)
    assert placed == {"v1": 1, "v2": 1}
    assert unplaced == {"no upstream host": 1, "not a variant's: 10.9.9.9": 1}


def test_an_address_two_variants_share_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"endpoint 10\.0\.0\.1 serves both v1 and v2"):
        variants_by_address({"v1": ["10.0.0.1:8000"], "v2": ["10.0.0.1:8001"]})


def test_a_rule_sent_whole_to_one_pool_is_refuted_by_its_answers():
    """istio#61594: the rule's 5 % canary pool never picked; every answer from the baseline's pods."""
    by = variants_by_address({"v1": ["10.0.0.1", "10.0.0.2"], "v2": ["10.0.1.1"]})
    placed, _ = served_by(["10.0.0.1:8000", "10.0.0.2:8000"] * 306, by)
    proof = SplitTest(0.05).add(placed["v2"], sum(placed.values()))
    assert proof.proof(0.01) == Proof.REFUTED
    assert proof.describe().startswith("5% asked, 0 of 612 answers from the candidate's endpoints")
