"""Engine stand-in pods (tests/support/engine_standin.py) behind a gateway stack: several pods per
variant, each its own process on a free port, stopped by PID with the stack."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path

from graystack.local.gateway_stack import answers, default_spec
from graystack.local.processes import ManagedProcess, start_process, wait_until
from tests.support.engine_standin import Pace, engine_argv


class EnginePods:
    """`pods`: pod name -> its variant. The spec starts as the local stack's (gateway_stack.default_spec)
    with every pod of a variant among its endpoints, changed by `spec_changes` (top-level fields)."""

    def __init__(
        self,
        pods: Mapping[str, str],
        pace: Pace | None = None,
        *,
        full_answers: bool = False,
        spec_changes: dict | None = None,
    ) -> None:
        self.pods = dict(pods)
        self.pace = pace or Pace()
        self.full_answers = full_answers
        self.spec_changes = spec_changes or {}
        self.port_names = tuple(self.pods)
        self.running: dict[str, ManagedProcess] = {}
        self.ports: dict[str, int] = {}

    def start(self, ports: Mapping[str, int], logs: Path) -> dict:
        self.ports = {name: ports[name] for name in self.pods}
        for seed, (name, variant) in enumerate(self.pods.items()):
            argv = engine_argv(name, variant, ports[name], self.pace, seed, self.full_answers)
            self.running[name] = start_process(name, [sys.executable, *argv], logs)
        for name in self.pods:
            wait_until(partial(answers, ports[name], "/readyz"), 15, f"engine stand-in {name}")
        spec = default_spec(0, 0)
        for variant in spec["variants"]:
            spec["variants"][variant]["endpoints"] = self.endpoints(variant)
        return {**spec, **self.spec_changes}

    def endpoints(self, variant: str) -> list[str]:
        return [f"127.0.0.1:{self.ports[name]}" for name, v in self.pods.items() if v == variant]

    def gateway_args(self, envoy_admin: str) -> list[str]:
        return []

    def scrape_jobs(self) -> dict[str, tuple[str, str]]:
        return {}

    def processes(self) -> list[ManagedProcess]:
        return list(self.running.values())
