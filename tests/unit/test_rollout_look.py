"""The pure look (gateway/rollout/look.py), table-tested without a controller, an event loop or I/O: a
script of looks in, the state and the actions out; then the rollback's reason label it returns is the
one a real controller shows in status and counts in graystack_rollout_rollbacks_total."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from gateway.metrics.observations import Observations
from gateway.rollout.analysis import Verdict
from gateway.rollout.look import Carried, Look, look
from gateway.rollout.machine import initial_state
from gateway.rollout.rollout_state import Command, Phase, RecordDecision, RolledBack, RolloutState
from gateway.spec.model import RolloutSpec, validate_spec
from tests.support.counting_provider import CountingProvider, Traffic
from tests.unit.test_rollout_controller import (
    FAILING,
    HEALTHY,
    NAME,
    candidate_counts,
    metric,
    new_controller,
    new_gateway,
    spec_data,
)

ENVOY_DOWN = "scrape of http://127.0.0.1:9901/stats/prometheus failed: connection refused"
LOW = {"baseline": Traffic(1900), "zero-layer": Traffic(100)}
SHARED = {"baseline": Traffic(1900, 95), "zero-layer": Traffic(100, 5)}  # both at 5 %
MISMATCH = "the file is ERASED sha256:fedcba9876543210, the server loaded ACTIVE sha256:0123456789abcdef"


def read(provider: CountingProvider) -> Observations:
    """The stand-in provider's next observations (its observe() does no I/O)."""
    return asyncio.run(provider.observe())


@dataclass
class Run:
    """A controller's memory between looks, and nothing else: the spec, the state, what the last look
    left, the clock, and the counters a provider would read."""

    spec: RolloutSpec
    proxy_seen: bool = True
    now: float = 1_000_000.0
    provider: CountingProvider = field(default_factory=CountingProvider)
    state: RolloutState = field(init=False)
    carried: Carried = field(init=False)
    looks: list[Look] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = initial_state(self.spec, self.now)
        self.carried = Carried(proxy_seen=self.proxy_seen)

    def after(self, seconds: float, what: dict | str | Command) -> Look:
        """One look `seconds` on: traffic (variant -> Traffic), an unreadable source (its error), or a
        command (no metrics)."""
        self.now += seconds
        if isinstance(what, Command):
            done = look(self.spec, self.state, self.carried, self.now, command=what)
        else:
            self.provider.per_look, self.provider.error = (
                ({}, what) if isinstance(what, str) else (what, None)
            )
            done = look(self.spec, self.state, self.carried, self.now, seen=read(self.provider))
        self.state, self.carried = done.state, done.carried
        self.looks.append(done)
        return done

    def rolled_back(self) -> list[str]:
        return [a.reason for done in self.looks for a in done.actions if isinstance(a, RolledBack)]

    def checks(self) -> dict[str, Verdict]:
        [decision] = [a for a in self.looks[-1].actions if isinstance(a, RecordDecision)]
        return {check.name: check.verdict for check in decision.checks}


def spec(**analysis) -> RolloutSpec:
    data = spec_data()
    data["analysis"].update(analysis)
    return validate_spec(data)


@pytest.mark.parametrize(
    ("name", "analysis", "script", "label"),
    [
        ("a candidate error burst", {}, [HEALTHY, FAILING], "error_rate"),
        ("every failing check shared", {}, [LOW, *[SHARED] * 20], "shared_incident"),
        ("unreadable 3 looks on", {"on_error": "rollback"}, [HEALTHY, *[ENVOY_DOWN] * 3], "metrics_error"),
        ("an operator rollback", {}, [HEALTHY, Command.ROLLBACK], "operator"),
        ("a healthy stage", {}, [HEALTHY, HEALTHY], None),
        ("unreadable 3 looks on, frozen", {}, [HEALTHY, *[ENVOY_DOWN] * 3], None),
        ("shared, held", {"on_shared_incident": "hold"}, [LOW, *[SHARED] * 20], None),
    ],
)
def test_a_rollback_carries_the_label_it_is_counted_under(name, analysis, script, label):
    run = Run(spec(**analysis))
    for what in script:
        run.after(1, what)
        if run.rolled_back():
            break
    assert run.rolled_back() == ([label] if label else []), name
    assert (run.state.phase == Phase.ROLLED_BACK) == (label is not None), name


def test_healthy_counters_hold_through_the_stage_and_advance_after_it():
    run = Run(spec())
    first = run.after(0, HEALTHY)
    assert "no saved evidence for this rollout" in first.tests_started
    assert candidate_counts(run.state.evidence)[0] == 0  # the first look only sets the start
    assert run.looks[-1].actions[0].outcome.sentence == "hold: 0s of 600s held"
    assert run.after(300, HEALTHY).tests_started is None  # the same tests go on
    assert (run.state.step, candidate_counts(run.state.evidence)[0]) == (0, 5000)
    assert run.looks[-1].actions[0].outcome.sentence == "hold: 300s of 600s held"
    run.after(300, HEALTHY)
    assert (run.state.step, run.state.weight) == (1, 20)
    assert run.looks[-1].actions[0].outcome.sentence == "advance to step 1"
    assert run.carried.token_rates.looks[-1][0] == run.now


def test_once_promoted_no_stage_extends_and_the_error_rate_is_its_test_alone():
    """Promoted, no stage ends on evidence: a look with a handful of requests is no "extending" hold
    (status once showed error_rate inconclusive right after a promotion, read as a failing guard)."""
    run = Run(spec())
    run.after(0, LOW)
    run.after(1, LOW)
    assert run.checks()["error_rate"] == Verdict.INCONCLUSIVE  # a stage that ends on evidence extends
    while run.state.phase != Phase.PROMOTED:  # the operator steps it through to the last step
        run.after(1, Command.PROMOTE)
    run.after(1, LOW)
    assert run.checks()["error_rate"] == Verdict.PASS


def test_an_error_burst_rolls_back_on_the_failing_checks_and_says_which():
    run = Run(spec())
    run.after(1, HEALTHY)
    run.after(1, FAILING)
    assert run.checks()["error_rate"] == Verdict.FAIL
    assert run.state.reason.startswith("rolled back: error_rate fail")
    assert run.state.rollback_started == run.now
    assert run.rolled_back() == ["error_rate"]


def test_a_checkpoint_the_server_did_not_load_rolls_back_under_weight_status():
    run = Run(spec())
    run.provider.mismatches = {"zero-layer": [MISMATCH]}
    run.after(1, HEALTHY)
    assert run.rolled_back() == ["weight_status"]


def test_an_unreadable_look_is_an_error_once_a_proxy_connected_and_a_hold_before():
    seen = Run(spec())
    seen.after(1, HEALTHY)
    seen.after(1, ENVOY_DOWN)
    assert set(seen.checks().values()) == {Verdict.ERROR}
    assert seen.state.errors == 1
    assert seen.carried.counters == seen.looks[0].carried.counters  # nothing read, nothing kept

    unseen = Run(spec(), proxy_seen=False)
    for _ in range(5):
        unseen.after(5, ENVOY_DOWN)
    assert set(unseen.checks().values()) == {Verdict.INCONCLUSIVE}
    [decision] = [a for a in unseen.looks[-1].actions if isinstance(a, RecordDecision)]
    assert all(c.reason == f"no proxy connected yet ({ENVOY_DOWN})" for c in decision.checks)
    assert (unseen.state.errors, unseen.state.paused) == (0, False)


def test_a_command_looks_at_no_metrics_and_a_retry_starts_new_count_saying_why():
    run = Run(spec())
    run.after(1, HEALTHY)
    rollback = run.after(1, Command.ROLLBACK)
    assert not [a for a in rollback.actions if isinstance(a, RecordDecision)]
    assert rollback.carried == run.looks[0].carried
    run.after(1, Command.RETRY)
    assert run.state.evidence is None
    assert run.after(1, HEALTHY).tests_started.startswith("operator retry; alpha ")


async def test_the_label_the_look_returns_is_the_one_status_shows_and_the_metric_counts(tmp_path):
    """A real controller on the same observations: the look's RolledBack label is the counter's label
    and the failing check status names first, and the look's reason is status's."""

    class Replay:
        seen = Observations()

        def new_count(self) -> None:
            pass

        def close(self) -> None:
            pass

        async def observe(self) -> Observations:
            return self.seen

    class Clock:
        now = 1_000_000.0

        def __call__(self) -> float:
            return self.now

    replay, counting, clock = Replay(), CountingProvider(HEALTHY), Clock()
    controller = new_controller(new_gateway(), tmp_path, clock, replay)
    replay.seen = await counting.observe()
    await controller.tick()
    counting.per_look = FAILING
    replay.seen = await counting.observe()
    expected = look(controller.spec, controller.state, controller._carried, clock.now, seen=replay.seen)
    [label] = [a.reason for a in expected.actions if isinstance(a, RolledBack)]
    before = metric("graystack_rollout_rollbacks_total", rollout=NAME, reason=label)

    await controller.tick()
    status = controller.status()
    assert (status.phase, status.reason) == ("rolled_back", expected.state.reason)
    assert status.last_decision is not None
    failing = [c.name for c in status.last_decision.checks if c.verdict == "fail"]
    assert failing[0] == label == "error_rate"
    assert metric("graystack_rollout_rollbacks_total", rollout=NAME, reason=label) == before + 1
    controller.rollback.task.cancel()
