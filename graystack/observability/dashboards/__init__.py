"""The four Grafana dashboards, built with grafana-foundation-sdk (docs/dashboards-and-alerts.md says what
each shows), one module each; panels.py holds what they share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from graystack.observability.dashboards.control_plane import control_plane
from graystack.observability.dashboards.probes import probes
from graystack.observability.dashboards.rollout import CHECKS, rollout_decisions
from graystack.observability.dashboards.variants import variants_side_by_side

__all__ = ["CHECKS", "DASHBOARDS", "queries", "render"]

DASHBOARDS: dict[str, Callable[[], gd.Dashboard]] = {
    "rollout-decisions": rollout_decisions,
    "variants": variants_side_by_side,
    "probes": probes,
    "control-plane": control_plane,
}


def render(name: str) -> str:
    """The dashboard's JSON as committed: sorted keys, two-space indent, a final newline."""
    built = DASHBOARDS[name]().build()
    return json.dumps(json.loads(JSONEncoder().encode(built)), sort_keys=True, indent=2) + "\n"


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and annotation of a rendered dashboard: what the tests
    send to Prometheus. `where` is `<panel title> [refId]` or `annotation <name>`."""
    found = [
        (f"{panel['title']} [{target['refId']}]", target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    found += [(f"annotation {a['name']}", a["expr"]) for a in board.get("annotations", {}).get("list", [])]
    return found
