"""What one Locust process keeps for the run's summary (the locustfile's Run, made by Locust's init event):
its users' tallies and, on the master or a local run, the totals, the split tracker and the weight poller."""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import WorkerRunner
from locust.stats import RequestStats

from gateway.spec.fields import parse_duration
from graystack.admin_client import AdminClient, AdminError
from loadtests import config, measured, summary
from loadtests.conversation import Stickiness
from loadtests.split import SplitTracker, Tally, report_bins

log = logging.getLogger("graystack.loadtest")


class Run:
    """What this Locust process keeps for the summary: its tally, and (master or local) the totals,
    the split tracker and the weight poller."""

    def __init__(self, environment: Environment) -> None:
        options, runner = environment.parsed_options, environment.runner
        if options is None or runner is None:
            raise RuntimeError("the locustfile runs under the locust command (its options and a runner)")
        self.runner = runner
        self.options = options
        self.client_types = config.parse_mix(options.client_types, "client types")
        self.prompt_lengths = config.parse_prompt_lengths(options.prompt_lengths)
        self.think_time = config.parse_think_time(options.think_time)
        if options.conversation_turns < 1:
            raise ValueError(f"conversation turns: {options.conversation_turns} is not 1 or more")
        self.tally = Tally()
        self.turns = Stickiness()  # what this process's conversation users counted since its last report
        self.stickiness = Stickiness()  # every process's, summed
        self.conversing = any(c.__name__ == "ConversationUser" for c in environment.user_classes)
        self.requests: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.tracker = SplitTracker(guard=options.flip_guard, alpha=options.split_alpha)
        self.started = time.time()
        self.static = None
        if options.expected_weights and not options.admin_url:
            self.static = {"weights": config.parse_mix(options.expected_weights, "expected weights")}
            self.tracker.observe(0.0, 0.0, self.static)
        self.poller: gevent.Greenlet | None = None
        self.gateway_at_start: measured.Readings | None = None
        self.admin: AdminClient | None = None
        if options.admin_url and not isinstance(runner, WorkerRunner):
            self.admin = AdminClient(options.admin_url, options.admin_token or None, timeout=5)

    def start(self) -> None:
        """Reads the gateway and starts polling it (master or local, with an admin URL). Kept out of
        __init__: this I/O lets gevent run the master's listener, and a worker's report that arrives
        then must find the Run already in place (else Locust fails the init event and exits 1)."""
        if self.admin is not None:
            self.gateway_at_start = self.read_gateway(self.admin)
            self.poller = gevent.spawn(self._poll_forever, self.admin)

    @staticmethod
    def read_gateway(admin: AdminClient) -> measured.Readings | None:
        """The gateway's measurement of every answer so far (None: unreadable, said in the log)."""
        try:
            return measured.read(admin.metrics())
        except AdminError as error:
            log.warning("cannot read what the gateway measured: %s", error)
            return None

    def poll(self, admin: AdminClient) -> None:
        sent = time.time()
        try:
            live = admin.status().routing
        except AdminError as error:
            log.warning("cannot read the configured weights: %s", error)
            live = None
        routing = live.model_dump() if live else None  # any change to it starts a new period
        self.tracker.observe(sent, time.time(), routing)

    def _poll_forever(self, admin: AdminClient) -> None:
        while True:
            self.poll(admin)
            self.absorb(self.drain())
            gevent.sleep(self.options.weights_poll)

    def absorb(self, report: dict[str, Any], source: str = "local") -> None:
        self.stickiness.add(report["turns"])
        self.requests.update(report["requests"])
        self.failures.update(report["failures"])
        self.tracker.add(report_bins(report), report["oldest_running"], source)

    def finish(self) -> summary.Summary:
        if self.poller is not None and self.admin is not None:
            self.poller.kill(block=True)
            self.poll(self.admin)  # confirms the period of the last requests
        self.absorb(self.drain())
        checked = bool(self.options.admin_url or self.static)
        o = self.options
        objectives = summary.Objectives(
            max_error_rate=o.max_error_rate,
            max_ttft_p95=parse_duration(o.max_ttft_p95) if o.max_ttft_p95 else None,
            max_e2e_p99=parse_duration(o.max_e2e_p99) if o.max_e2e_p99 else None,
            split_required=checked,
        )
        stats = self.runner.stats
        at_end = self.read_gateway(self.admin) if self.gateway_at_start and self.admin else None
        gateway = (
            measured.measured(self.gateway_at_start, at_end) if self.gateway_at_start and at_end else None
        )
        result = summary.Summary(
            variants=[
                summary.VariantStats(v, self.requests[v], self.failures[v], _latencies(stats, v))
                for v in sorted(self.requests)
            ],
            requests=sum(self.requests.values()),
            failures=sum(self.failures.values()),
            user_exceptions=len(self.runner.exceptions),
            split=self.tracker.result() if checked else None,
            objectives=objectives,
            gateway=gateway,
            conversations=self.stickiness if self.conversing else None,
        )
        return summary.judge(result)

    def drain(self) -> dict[str, Any]:
        """This process's report since the last: the split tally's and the conversation turns' counts."""
        return {**self.tally.drain(), "turns": self.turns.drain()}

    def summary_dir(self) -> Path | None:
        if self.options.summary_dir:
            return Path(self.options.summary_dir)
        return Path(self.options.csv_prefix).parent if self.options.csv_prefix else None


def _latencies(stats: RequestStats, variant: str) -> dict[str, dict[str, float]]:
    """p50/p95/p99 in seconds of the variant's TTFT, ITL and E2E entries (Locust's rounded histogram)."""
    found = {}
    for kind, entry_type in zip(summary.LATENCIES, ("TTFT", "ITL", "E2E"), strict=True):
        entry = stats.entries.get((variant, entry_type))
        if entry is not None and entry.num_requests:
            found[kind] = {
                f"p{round(q * 100)}": entry.get_response_time_percentile(q) / 1000 for q in (0.5, 0.95, 0.99)
            }
    return found
