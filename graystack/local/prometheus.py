"""A local Prometheus for `graystack up`: scrapes every process of the stack, loads the chart's alert
rules when the repository has them, keeps its data in the run folder, and binds loopback only."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from graystack.local.processes import ManagedProcess, start_process

ALERT_RULES = (
    Path(__file__).resolve().parents[2] / "charts" / "graystack" / "files" / "prometheus" / "alerts.yml"
)
SCRAPE_INTERVAL = "2s"


def prometheus_config(jobs: dict[str, tuple[str, str]], rules: Path | None) -> dict:
    """Scrape configs for `jobs` (name -> `(host:port, metrics path)`), plus `rules` if given."""
    config: dict = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {"job_name": job, "metrics_path": path, "static_configs": [{"targets": [address]}]}
            for job, (address, path) in jobs.items()
        ],
    }
    if rules is not None:
        config["rule_files"] = [str(rules)]
    return config


def start_prometheus(
    binary: str, jobs: dict[str, tuple[str, str]], workdir: Path, port: int
) -> ManagedProcess:
    """Prometheus on 127.0.0.1:`port`, ready (or a StartupError with its log) when this returns."""
    rules = ALERT_RULES if ALERT_RULES.exists() else None
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(prometheus_config(jobs, rules), sort_keys=False))
    argv = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    process = start_process("prometheus", argv, workdir / "logs")
    url = f"http://127.0.0.1:{port}/-/ready"
    process.wait_healthy(lambda: httpx.get(url, timeout=2).status_code == 200, 30, "Prometheus")
    return process
