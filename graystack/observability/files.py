"""Where the generated files live in the repository (the chart reads them from there)."""

from __future__ import annotations

from pathlib import Path

from graystack.observability import alerts, dashboards

DASHBOARD_DIR = Path("charts/graystack/files/dashboards")
ALERTS_FILE = Path("charts/graystack/files/prometheus/alerts.yml")


def outputs() -> dict[Path, str]:
    """Each generated file's path, relative to the repository root, and its content."""
    files = {DASHBOARD_DIR / f"{name}.json": dashboards.render(name) for name in dashboards.DASHBOARDS}
    files[ALERTS_FILE] = alerts.render()
    return files
