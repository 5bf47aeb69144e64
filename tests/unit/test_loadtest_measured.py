"""The load test's end summary reports what the gateway measured of the run (loadtests/measured.py): the
gateway's own /metrics, as its answer receiver exports it, read before and after, per variant."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from gateway.answers.receiver import AnswerReceiver
from gateway.answers.store import AnswerStore
from loadtests.measured import measured, read
from loadtests.summary import Objectives, Summary, render
from tests.unit.test_answers import STREAM, entry


def page() -> str:
    return generate_latest(REGISTRY).decode()


def test_the_run_adds_what_the_gateway_received_during_it():
    before = read(page())
    receiver = AnswerReceiver(AnswerStore())
    for _ in range(3):
        receiver.take(entry({**STREAM, "output": 10}))  # 250 ms to the first token
    receiver.take(entry({**STREAM, "final": False, "output": 4}))  # cut before its final event
    receiver.take(entry({**STREAM, "finish": "length", "output": 8}))
    stats = {s.variant: s for s in measured(before, read(page()))}
    baseline = stats["baseline"]
    assert (baseline.answers, baseline.output_tokens, baseline.endings.get("cut")) == (5, 42, 1)
    assert baseline.length_share == 1 / 5
    assert 0.2 < baseline.ttft["p50"] < 0.3  # 250 ms, within its bucket (edges 1.2 apart)
    assert set(baseline.itl) == {"p50", "p95"}
    summary = Summary([], 5, 0, 0, None, Objectives(), gateway=list(stats.values()))
    text = render(summary, 0.0)
    assert "as the gateway measured every answer" in text
    assert "baseline" in text.split("as the gateway measured every answer")[1]


def test_without_an_admin_url_the_summary_says_it_did_not_read_the_gateway():
    assert "as the gateway measured: not read (no admin URL)" in render(
        Summary([], 0, 0, 0, None, Objectives()), 0.0
    )
