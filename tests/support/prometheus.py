"""A real Prometheus server for integration tests: free loopback port, temp storage, stopped by PID."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from graystack.local import loopback
from graystack.local import prometheus as local_prometheus
from graystack.local.processes import ManagedProcess, free_port

SCRAPE_INTERVAL = "1s"  # so that a look soon after the traffic finds a scrape that saw it


@dataclass
class PrometheusServer:
    process: ManagedProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        return loopback.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def query(self, promql: str) -> dict:
        """The API's whole answer (status included) to an instant query."""
        return loopback.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()

    def stop(self) -> None:
        self.process.stop()


def start_prometheus(
    binary: str, workdir: Path, targets: dict[str, tuple[str, str]], rule_files: Sequence[Path] = ()
) -> PrometheusServer:
    """Prometheus scraping each job's `(host:port, metrics path)` every second, evaluating `rule_files`
    every second too; ready when it answers (graystack up's Prometheus, on a free port)."""
    port = free_port()
    process = local_prometheus.start_prometheus(
        binary, targets, workdir, port, rules=rule_files, scrape_interval=SCRAPE_INTERVAL
    )
    return PrometheusServer(process, port)
