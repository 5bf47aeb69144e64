"""The saved state's format 1, read into format 2: a rollout saved before the checks kept their tests
apart resumes the same tests. Pure.

Format 1 kept every check's tests as fields of one evidence record; format 2 keeps each check's in its
own record under the check's name (gateway/rollout/checks/). Both latency comparisons had shared the
load guard and the measured-answer counts: each gets a copy. Drop this reader once no gateway writes
format 1 (it stopped with the release that wrote format 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def upgraded(state: Mapping[str, Any]) -> dict[str, Any]:
    """A format-1 state (its `state` object) as format 2 reads it."""
    evidence = state.get("evidence")
    return {**state, "evidence": None if evidence is None else _evidence(evidence)}


def _evidence(old: Mapping[str, Any]) -> dict[str, Any]:
    measured = {"answered": old.get("answered", 0), "sent": old.get("sent", 0)}
    tests: dict[str, Any] = {
        "error_rate": {
            "candidate": old["candidate_errors"],
            "baseline": old["baseline_errors"],
            "bounds": old.get("error_bounds", (0.0, 1.0)),
            "kind": "error_rate",
        }
    }
    if old.get("error_ratio") is not None:
        tests["error_ratio"] = {"test": old["error_ratio"], "kind": "error_ratio"}
    if old.get("candidate_ttft") is not None:
        tests["ttft_p95"] = {
            "candidate": old["candidate_ttft"],
            "baseline": old["baseline_ttft"],
            "edge": old.get("ttft_edge"),
            **measured,
            "kind": "ttft_p95",
        }
    guard = {"busier_looks": old.get("busier_looks", 0), "load": old.get("load", (0.0, 0.0)), **measured}
    for name, signal, probed in (
        ("ttft_vs_baseline", "ttft", old.get("ttft_probed", 0)),
        ("itl_vs_baseline", "itl", 0),
    ):
        tests[name] = {
            "shift": old.get(f"{signal}_shift"),
            "exact": old.get(f"{signal}_exact"),
            "seen": old.get(f"{signal}_seen", 0),
            "probed": probed,
            **guard,
            "kind": "latency",
        }
    if old.get("disagreement") is not None:
        tests["shadow_agreement"] = {"test": old["disagreement"], "kind": "shadow_agreement"}
    if old.get("structure") is not None:
        tests["structure"] = {
            "test": old["structure"],
            "cuts": old.get("length_cuts", (0, 0, 0, 0)),
            "kind": "structure",
        }
    if old.get("judge") is not None:
        tests["judge"] = {"test": old["judge"], "ties": old.get("judge_ties", 0), "kind": "judge"}
    return {
        "plan": old["plan"],
        "started": old["started"],
        "stage": old["stage"],
        "tests": tests,
        "not_worse": old.get("not_worse"),
    }
