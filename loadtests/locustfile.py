"""Locust users for graystack: Messages requests through the gateway, streamed, with a mix of
X-Client-Type values and prompt lengths.

Each request is one `/v1/messages` entry (Locust's own time for it stops at the headers) plus, per
variant (the `x-graystack-variant` header), `TTFT`, `ITL` (mean gap between deltas) and `E2E` entries.
At the end the summary (loadtests/summary.py) is printed and written beside the CSV, and its verdict
becomes the exit code. LOAD_SHAPE picks the shape: soak (default), step, or none (--users/--run-time).

    locust -f loadtests/locustfile.py --headless --host http://127.0.0.1:8080 \
        --admin-url http://127.0.0.1:9000 --csv runs/soak/locust --html runs/soak/report.html
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import gevent
from locust import HttpUser, events, task
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.runners import Runner, WorkerRunner
from locust.stats import RequestStats
from requests import RequestException

from gateway.spec.fields import parse_duration
from graystack.admin_client import AdminClient, AdminError
from loadtests import config, measured, summary
from loadtests.shapes import SHAPES
from loadtests.split import SplitTracker, Tally, report_bins
from loadtests.stream import StreamError, StreamTiming, sse_events

log = logging.getLogger("graystack.loadtest")

SHAPE = os.environ.get("LOAD_SHAPE") or "soak"
if SHAPE != "none":
    Shape = SHAPES[SHAPE]  # a shape class in the locustfile's namespace is the one Locust runs

REPORT_KEY = "graystack"


@events.init_command_line_parser.add_listener
def _options(parser: LocustArgumentParser) -> None:
    parser.add_argument(
        "--client-types",
        env_var="LOADTEST_CLIENT_TYPES",
        default=config.DEFAULT_CLIENT_TYPES,
        help="X-Client-Type mix, NAME=WEIGHT,...; '-' sends no header",
    )
    parser.add_argument(
        "--prompt-lengths",
        env_var="LOADTEST_PROMPT_LENGTHS",
        default=config.DEFAULT_PROMPT_LENGTHS,
        help="prompt length mix in bytes, BYTES=WEIGHT,...",
    )
    parser.add_argument(
        "--max-tokens", env_var="LOADTEST_MAX_TOKENS", type=int, default=config.DEFAULT_MAX_TOKENS
    )
    parser.add_argument("--model", env_var="LOADTEST_MODEL", default="graystack-tiny")
    parser.add_argument(
        "--think-time",
        env_var="LOADTEST_THINK_TIME",
        default=config.DEFAULT_THINK_TIME,
        help="seconds between one user's requests",
    )
    parser.add_argument(
        "--admin-url",
        env_var="LOADTEST_ADMIN_URL",
        default="",
        help="the gateway's admin API, polled for the configured weights (empty: not polled)",
    )
    parser.add_argument("--admin-token", env_var="GRAYSTACK_ADMIN_TOKEN", default="", is_secret=True)
    parser.add_argument(
        "--expected-weights",
        env_var="LOADTEST_EXPECTED_WEIGHTS",
        default="",
        help="without --admin-url: the split every request should follow, e.g. baseline=80,zero-layer=20",
    )
    parser.add_argument("--weights-poll", env_var="LOADTEST_WEIGHTS_POLL", type=float, default=0.5)
    parser.add_argument(
        "--flip-guard",
        env_var="LOADTEST_FLIP_GUARD",
        type=float,
        default=0.5,
        help="seconds either side of a detected flip whose requests the split check leaves out",
    )
    parser.add_argument("--split-alpha", env_var="LOADTEST_SPLIT_ALPHA", type=float, default=0.01)
    parser.add_argument("--max-error-rate", env_var="LOADTEST_MAX_ERROR_RATE", type=float, default=0.003)
    parser.add_argument(
        "--max-ttft-p95", env_var="LOADTEST_MAX_TTFT_P95", default="", help="e.g. 2s; empty: off"
    )
    parser.add_argument(
        "--max-e2e-p99", env_var="LOADTEST_MAX_E2E_P99", default="", help="e.g. 30s; empty: off"
    )
    parser.add_argument(
        "--summary-dir",
        env_var="LOADTEST_SUMMARY_DIR",
        default="",
        help="where summary.txt/json go (default: the --csv prefix's folder)",
    )


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
        self.tally = Tally()
        self.requests: Counter = Counter()
        self.failures: Counter = Counter()
        self.tracker = SplitTracker(guard=options.flip_guard, alpha=options.split_alpha)
        self.started = time.time()
        self.static = None
        if options.expected_weights and not options.admin_url:
            self.static = {"weights": config.parse_mix(options.expected_weights, "expected weights")}
            self.tracker.observe(0.0, 0.0, self.static)
        self.poller = None
        self.gateway_at_start: measured.Readings | None = None
        if options.admin_url and not isinstance(runner, WorkerRunner):
            self.admin = AdminClient(options.admin_url, options.admin_token or None, timeout=5)
            self.gateway_at_start = self.read_gateway()
            self.poller = gevent.spawn(self._poll_forever)

    def read_gateway(self) -> measured.Readings | None:
        """The gateway's measurement of every answer so far (None: unreadable, said in the log)."""
        try:
            return measured.read(self.admin.metrics())
        except AdminError as error:
            log.warning("cannot read what the gateway measured: %s", error)
            return None

    def poll(self) -> None:
        sent = time.time()
        try:
            live = self.admin.status().routing
        except AdminError as error:
            log.warning("cannot read the configured weights: %s", error)
            live = None
        routing = live.model_dump() if live else None  # any change to it starts a new period
        self.tracker.observe(sent, time.time(), routing)

    def _poll_forever(self) -> None:
        while True:
            self.poll()
            self.absorb(self.tally.drain())
            gevent.sleep(self.options.weights_poll)

    def absorb(self, report: dict, source: str = "local") -> None:
        self.requests.update(report["requests"])
        self.failures.update(report["failures"])
        self.tracker.add(report_bins(report), report["oldest_running"], source)

    def finish(self) -> summary.Summary:
        if self.poller is not None:
            self.poller.kill(block=True)
            self.poll()  # confirms the period of the last requests
        self.absorb(self.tally.drain())
        checked = bool(self.options.admin_url or self.static)
        o = self.options
        objectives = summary.Objectives(
            max_error_rate=o.max_error_rate,
            max_ttft_p95=parse_duration(o.max_ttft_p95) if o.max_ttft_p95 else None,
            max_e2e_p99=parse_duration(o.max_e2e_p99) if o.max_e2e_p99 else None,
            split_required=checked,
        )
        stats = self.runner.stats
        at_end = self.read_gateway() if self.gateway_at_start is not None else None
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
        )
        return summary.judge(result)

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


RUN: Run | None = None


def _run() -> Run:
    """This process's Run, made by Locust's init event (every listener and user runs after it)."""
    if RUN is None:
        raise RuntimeError("the locustfile's Run is read before Locust's init event")
    return RUN


@events.init.add_listener
def _init(environment: Environment, **_: object) -> None:
    global RUN
    RUN = Run(environment)
    runner = RUN.runner
    if not isinstance(runner, WorkerRunner):
        gevent.signal_handler(signal.SIGTERM, lambda: _end_early(runner))


def _end_early(runner: Runner) -> None:
    """SIGTERM (a stop by PID) during a headless shape run. Locust 2.47 installs its own SIGTERM handler
    only once such a run is over, so the signal would kill it with no summary, HTML or verdict; ending
    the shape instead lets Locust shut down as after a completed run. Without a shape, or once the
    shape has ended, Locust's own handler (which runs beside this one) does the work."""
    if runner.shape_greenlet is not None and not runner.shape_greenlet.dead:
        log.info("SIGTERM: ending the load shape")
        runner.shape_greenlet.kill(block=False)


@events.report_to_master.add_listener
def _report(client_id: str, data: dict) -> None:
    data[REPORT_KEY] = _run().tally.drain()


@events.worker_report.add_listener
def _worker_report(client_id: str, data: dict) -> None:
    if REPORT_KEY in data:
        _run().absorb(data[REPORT_KEY], client_id)


@events.quitting.add_listener
def _quitting(environment: Environment, **_: object) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    result = _run().finish()
    text = summary.render(result, _run().started)
    print(text, flush=True)
    folder = _run().summary_dir()
    if folder is not None:
        summary.write(result, _run().started, folder)
    environment.process_exit_code = result.exit_code


class MessagesUser(HttpUser):
    """One client: a streamed Messages request, a think time, again."""

    def on_start(self) -> None:
        self.rng = random.Random()

    def wait_time(self) -> float:
        return self.rng.uniform(*_run().think_time)

    @task
    def message(self) -> None:
        run = _run()
        client_type = config.weighted_choice(run.client_types, self.rng)
        length = config.weighted_choice(run.prompt_lengths, self.rng)
        body = {
            "model": run.options.model,
            "max_tokens": run.options.max_tokens,
            "stream": True,
            "messages": [{"role": "user", "content": config.prompt_text(length, self.rng)}],
        }
        headers = {} if client_type == config.NO_HEADER else {"X-Client-Type": client_type}
        sent, timing = time.time(), StreamTiming(time.perf_counter())
        run.tally.start(sent)  # stopped mid-stream (the run's end), it stays running: see loadtests/split.py
        try:
            failed, variant = self._stream(body, headers, timing)
        except Exception:
            run.tally.abandon(sent)
            raise
        run.tally.record(sent, client_type, variant, failed)
        if not failed:
            for entry_type, seconds in (
                ("TTFT", timing.ttft),
                ("ITL", timing.inter_token),
                ("E2E", timing.e2e),
            ):
                if seconds is not None:
                    self.environment.events.request.fire(
                        request_type=entry_type,
                        name=variant,
                        response_time=seconds * 1000,
                        response_length=0,
                        exception=None,
                        context={},
                    )

    def _stream(self, body: dict, headers: dict, timing: StreamTiming) -> tuple[bool, str]:
        """Send one request and read its stream to the end; (failed, the variant that answered)."""
        with self.client.post(
            "/v1/messages", json=body, headers=headers, stream=True, catch_response=True
        ) as response:
            variant = response.headers.get("x-graystack-variant", "unknown")
            try:
                if response.status_code != 200:
                    raise StreamError(f"HTTP {response.status_code}: {response.text[:200]}")
                lines = (line.decode("utf-8") for line in response.iter_lines())
                for event in sse_events(lines):
                    timing.record(event, time.perf_counter())
                timing.check_complete()
            except (StreamError, RequestException, UnicodeDecodeError) as error:
                response.failure(f"{variant}: {error}")
                return True, variant
            response.success()
            return False, variant
