"""Locust users for graystack: Messages requests through the gateway, streamed, with a mix of
X-Client-Type values and prompt lengths.

Each request is one `/v1/messages` entry (Locust's own time for it stops at the headers) plus, per
variant (the `x-graystack-variant` header), `TTFT`, `ITL` (mean gap between deltas) and `E2E` entries.
At the end the summary (loadtests/summary.py) is printed and written beside the CSV, and its verdict
becomes the exit code. LOAD_SHAPE picks the shape: soak (default), step, or none (--users/--run-time).
LOADTEST_CONVERSATIONS (a share, default 0) makes that share of the users ConversationUsers: multi-turn
conversations under one identity, whose turns' stickiness to a variant and a pod the summary reports.

    locust -f loadtests/locustfile.py --headless --host http://127.0.0.1:8080 \
        --admin-url http://127.0.0.1:9000 --csv runs/soak/locust --html runs/soak/report.html
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
import uuid
from dataclasses import dataclass
from typing import Any

import gevent
from locust import HttpUser, events, task
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.runners import Runner, WorkerRunner
from requests import RequestException

from graystack.local.standin import POD_HEADER
from loadtests import config, summary
from loadtests.conversation import Conversation, Reached
from loadtests.run import Run
from loadtests.shapes import SHAPES
from loadtests.stream import StreamError, StreamTiming, sse_events

log = logging.getLogger("graystack.loadtest")

SHAPE = os.environ.get("LOAD_SHAPE") or "soak"
if SHAPE != "none":
    Shape = SHAPES[SHAPE]  # a shape class in the locustfile's namespace is the one Locust runs

REPORT_KEY = "graystack"
# The share of users that are ConversationUsers (0 to 1; default 0: MessagesUser only). Read when Locust
# loads this file, as the users' class weights are (a class of weight 0 is not run).
CONVERSATIONS = config.parse_share(os.environ.get("LOADTEST_CONVERSATIONS") or "0", "LOADTEST_CONVERSATIONS")


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
        "--conversation-turns",
        env_var="LOADTEST_CONVERSATION_TURNS",
        type=int,
        default=config.DEFAULT_CONVERSATION_TURNS,
        help="turns per conversation of the conversation users (LOADTEST_CONVERSATIONS)",
    )
    parser.add_argument(
        "--conversation-bytes",
        env_var="LOADTEST_CONVERSATION_BYTES",
        type=int,
        default=config.DEFAULT_CONVERSATION_BYTES,
        help="bytes of messages a conversation may carry before its user starts a new one",
    )
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
    RUN.start()
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
def _report(client_id: str, data: dict[str, Any]) -> None:
    data[REPORT_KEY] = _run().drain()


@events.worker_report.add_listener
def _worker_report(client_id: str, data: dict[str, Any]) -> None:
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


@dataclass(frozen=True)
class Streamed:
    """One streamed request: whether it failed, where it was answered, and the answer's text."""

    failed: bool
    reached: Reached
    text: str


class StreamingUser(HttpUser):
    """What both users share: one client type per user, a think time, and each streamed request's
    tally and TTFT/ITL/E2E entries."""

    abstract = True

    def on_start(self) -> None:
        self.rng = random.Random()

    def wait_time(self) -> float:
        return self.rng.uniform(*_run().think_time)

    def send(self, body: dict[str, Any], client_type: str, headers: dict[str, str]) -> Streamed:
        """Send one streamed request, count it, and fire its per-variant latency entries."""
        run = _run()
        if client_type != config.NO_HEADER:
            headers = {**headers, "X-Client-Type": client_type}
        sent, timing = time.time(), StreamTiming(time.perf_counter())
        run.tally.start(sent)  # stopped mid-stream (the run's end), it stays running: see loadtests/split.py
        try:
            streamed = self._stream(body, headers, timing)
        except Exception:
            run.tally.abandon(sent)
            raise
        run.tally.record(sent, client_type, streamed.reached.variant, streamed.failed)
        if not streamed.failed:
            for entry_type, seconds in (
                ("TTFT", timing.ttft),
                ("ITL", timing.inter_token),
                ("E2E", timing.e2e),
            ):
                if seconds is not None:
                    self.environment.events.request.fire(
                        request_type=entry_type,
                        name=streamed.reached.variant,
                        response_time=seconds * 1000,
                        response_length=0,
                        exception=None,
                        context={},
                    )
        return streamed

    def _stream(self, body: dict[str, Any], headers: dict[str, str], timing: StreamTiming) -> Streamed:
        """Send one request and read its stream to the end."""
        with self.client.post(
            "/v1/messages", json=body, headers=headers, stream=True, catch_response=True
        ) as response:
            variant = response.headers.get("x-graystack-variant", "unknown")
            reached = Reached(variant, response.headers.get(POD_HEADER))
            text: list[str] = []
            try:
                if response.status_code != 200:
                    raise StreamError(f"HTTP {response.status_code}: {response.text[:200]}")
                lines = (line.decode("utf-8") for line in response.iter_lines())
                for event in sse_events(lines):
                    timing.record(event, time.perf_counter())
                    if event.kind == "content_block_delta":
                        text.append(event.data.get("delta", {}).get("text", ""))
                timing.check_complete()
            except (StreamError, RequestException, UnicodeDecodeError) as error:
                response.failure(f"{variant}: {error}")
                return Streamed(True, reached, "")
            response.success()
            return Streamed(False, reached, "".join(text))


class MessagesUser(StreamingUser):
    """One client: a streamed Messages request with a fresh prompt, a think time, again."""

    weight = 100 - round(100 * CONVERSATIONS)

    @task
    def message(self) -> None:
        run = _run()
        length = config.weighted_choice(run.prompt_lengths, self.rng)
        body = {
            "model": run.options.model,
            "max_tokens": run.options.max_tokens,
            "stream": True,
            "messages": [{"role": "user", "content": config.prompt_text(length, self.rng)}],
        }
        self.send(body, config.weighted_choice(run.client_types, self.rng), {})


class ConversationUser(StreamingUser):
    """One person: one identity, conversations of --conversation-turns turns, each turn carrying the whole
    conversation so far (loadtests/conversation.py). Runs only with LOADTEST_CONVERSATIONS above 0."""

    weight = round(100 * CONVERSATIONS)

    def on_start(self) -> None:
        super().on_start()
        self.client_type = config.weighted_choice(_run().client_types, self.rng)  # one app per person
        self.user_id = f"user-{uuid.uuid4().hex[:12]}"
        self.conversation = self._new_conversation()

    def _new_conversation(self) -> Conversation:
        run = _run()
        options = run.options
        return Conversation(
            self.user_id, options.conversation_turns, run.prompt_lengths, self.rng, options.conversation_bytes
        )

    @task
    def turn(self) -> None:
        run, conversation = _run(), self.conversation
        asked = conversation.ask()
        body = {
            "model": run.options.model,
            "max_tokens": run.options.max_tokens,
            "stream": True,
            "messages": asked,
            "metadata": conversation.metadata(),
        }
        streamed = self.send(body, self.client_type, conversation.headers())
        if streamed.failed or not streamed.text:  # a turn not answered in full (or empty) ends it
            self.conversation = self._new_conversation()
            return
        conversation.answered(asked, streamed.text, streamed.reached, run.turns)
        if conversation.done:
            self.conversation = self._new_conversation()
