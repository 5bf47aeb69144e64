"""A real Prometheus server for integration tests: free loopback port, temp storage, stopped by PID."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from graystack.local.processes import ManagedProcess, free_port, start_process, wait_until

SCRAPE_INTERVAL = "1s"  # so that a few seconds of traffic hold enough samples for increase()


@dataclass
class PrometheusServer:
    process: ManagedProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def query(self, promql: str) -> dict:
        """The API's whole answer (status included) to an instant query."""
        return httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()

    def stop(self) -> None:
        self.process.stop()


def start_prometheus(
    binary: str, workdir: Path, targets: dict[str, tuple[str, str]], rule_files: Sequence[Path] = ()
) -> PrometheusServer:
    """Prometheus scraping each job's `(host:port, metrics path)` every second, evaluating `rule_files`
    every second too; ready when it answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    scrape_configs = [
        {"job_name": job, "metrics_path": path, "static_configs": [{"targets": [address]}]}
        for job, (address, path) in targets.items()
    ]
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": scrape_configs,
    }
    if rule_files:
        config["rule_files"] = [str(path.resolve()) for path in rule_files]
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    argv = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    server = PrometheusServer(start_process("prometheus", argv, workdir / "logs"), port)
    try:
        wait_until(lambda: not server.process.alive() or server.ready(), 20, "Prometheus to be ready")
    except TimeoutError:
        server.stop()
        raise
    if not server.process.alive():
        raise RuntimeError(f"prometheus exited:\n{server.process.log()}")
    return server
