"""A local Prometheus for `graystack up`: scrapes every process of the stack, loads the chart's alert
rules when the repository has them, keeps its data in the run folder, and binds loopback only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from graystack.local import loopback
from graystack.local.processes import ManagedProcess, start_process

ALERT_RULES = (
    Path(__file__).resolve().parents[2] / "charts" / "graystack" / "files" / "prometheus" / "alerts.yml"
)
SCRAPE_INTERVAL = "2s"


def prometheus_config(
    jobs: dict[str, tuple[str, str]], rules: Sequence[Path], scrape_interval: str = SCRAPE_INTERVAL
) -> dict[str, Any]:
    """Scrape configs for `jobs` (name -> `(host:port, metrics path)`), plus the `rules` files."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": job, "metrics_path": path, "static_configs": [{"targets": [address]}]}
            for job, (address, path) in jobs.items()
        ],
    }
    if rules:
        config["rule_files"] = [str(path.resolve()) for path in rules]
    return config


def default_rules() -> list[Path]:
    """The chart's alert rules, where this checkout has them."""
    return [ALERT_RULES] if ALERT_RULES.exists() else []


def start_prometheus(
    binary: str,
    jobs: dict[str, tuple[str, str]],
    workdir: Path,
    port: int,
    rules: Sequence[Path] | None = None,
    scrape_interval: str = SCRAPE_INTERVAL,
) -> ManagedProcess:
    """Prometheus on 127.0.0.1:`port`, ready (or a StartupError with its log) when this returns;
    `rules`: rule files to load (None: the chart's alert rules)."""
    rules = default_rules() if rules is None else rules
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(prometheus_config(jobs, rules, scrape_interval), sort_keys=False))
    argv = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    process = start_process("prometheus", argv, workdir / "logs")
    url = f"http://127.0.0.1:{port}/-/ready"
    process.wait_healthy(lambda: loopback.get(url, timeout=2).status_code == 200, 30, "Prometheus")
    return process
