"""One look at a rollout, pure: (spec, state, what the last look left, observations, command, now) ->
(state, actions, what this look leaves). The controller (gateway/rollout/controller.py) only measures,
calls this, and applies what comes back, so every decision can be replayed without an event loop.

A look with observations takes the counters' increments since the last look (increments.py), adds
them to the rollout's sequential tests (evidence.py, kept in the state; a state without evidence for
this plan starts new tests, and the look says why), judges them (analysis.py) and steps the machine
(machine.py). A look without observations (an operator command, a resume) only steps the machine. An
unreadable look adds nothing: the next one's increments cover it (a lost look merges into the next).

Before the first proxy connects: an interval whose metrics cannot be read is inconclusive ("no proxy
connected yet"), not an error. A gateway starts before its Envoy (the `direct` provider then finds
Envoy's admin refusing connections), and until a proxy connects no request follows the split this
controller sets, so there is nothing to judge and no fault to escalate. Once one has connected, an
unreadable source is an error again, even after every proxy has gone: an Envoy that dies mid-rollout
is a fault `analysis.on_error` must see (without Prometheus, its alert is the only one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.metrics.observations import Observations
from gateway.rollout import evidence as tests
from gateway.rollout.analysis import Check, Verdict, analyse, error_checks
from gateway.rollout.checks.base import Moment
from gateway.rollout.increments import Counters, increase, per_variant
from gateway.rollout.machine import step
from gateway.rollout.plan import Plan, plan_for
from gateway.rollout.rollout_state import (
    ADVANCING,
    Action,
    CapacityGate,
    Command,
    Phase,
    RolloutState,
    SplitGate,
    WebhookOutcome,
)
from gateway.rollout.throughput import TokenRates
from gateway.rollout.views import stage_of
from gateway.spec.model import RolloutSpec


@dataclass(frozen=True)
class Carried:
    """What one look leaves the next: the counters it read (the next one's increments start there; None
    before the first), the token rates (the capacity view's cost per million output tokens), and
    whether a proxy has connected since the controller started."""

    counters: Counters | None = None
    token_rates: TokenRates = TokenRates()
    proxy_seen: bool = False


@dataclass(frozen=True)
class Look:
    """What a look decided: the next state, the machine's actions for the controller, what it leaves the
    next look, and why new sequential tests started in it (None: none did)."""

    state: RolloutState
    actions: tuple[Action, ...]
    carried: Carried
    tests_started: str | None = None


def look(
    spec: RolloutSpec,
    state: RolloutState,
    carried: Carried,
    now: float,
    *,
    seen: Observations | None = None,
    command: Command | None = None,
    capacity: CapacityGate | None = None,
    webhook: WebhookOutcome | None = None,
    split: SplitGate | None = None,
) -> Look:
    """Judge `seen` (None: no metrics this call) and step the machine with it, `command` and `webhook`
    (the answer of step webhooks the machine asked for)."""
    checks, started = None, None
    if seen is not None:
        checks, state, carried, started = _judge(spec, state, carried, seen, now)
    state, actions = step(spec, state, checks, command, now, capacity, webhook, split)
    return Look(state, tuple(actions), carried, started)


def _judge(
    spec: RolloutSpec, state: RolloutState, carried: Carried, seen: Observations, now: float
) -> tuple[list[Check], RolloutState, Carried, str | None]:
    """The look's checks, with its increments added to the state's evidence first."""
    plan = plan_for(spec)
    if seen.error is not None:
        return _measurable(error_checks(seen.error, plan), carried), state, carried, None
    totals = increase(carried.counters, seen.counters)
    looks = per_variant(totals, spec.variants, seen.counters, seen.samples)
    generated = {variant: look.generated for variant, look in looks.items()}
    carried = replace(
        carried,
        # A series missing from this look (Prometheus marks a failed target's series stale) keeps its
        # last value: when it comes back, its increase is taken from there, not counted whole again.
        counters={**(carried.counters or {}), **seen.counters},
        token_rates=carried.token_rates.add(now, generated),
    )
    evidence, started = _evidence(plan, state, now)
    evidence = tests.add_look(evidence, plan, looks, stage_of(state))
    candidate = plan.candidate
    said = Moment(
        shadowing=state.phase == Phase.SHADOW,
        advancing=state.phase in ADVANCING and state.incident is None,  # no stage ends while held
        weight_status=seen.weight_status.get(candidate, ()),
        effective_windows=seen.effective_windows.get(candidate, ()),
        mismatches=seen.mismatches.get(candidate, ()),
        judge_problem=seen.judge_problem,
    )
    checks = analyse(plan, evidence, said)
    return _measurable(checks, carried), replace(state, evidence=evidence), carried, started


def _evidence(plan: Plan, state: RolloutState, now: float) -> tuple[tests.Evidence, str | None]:
    """The state's evidence, or new tests where it has none for this plan, with why they started."""
    current, watch = state.evidence, state.incident_watch
    if current is not None and current.plan == plan.key:
        if watch is None or current.started >= watch.tests_since:
            return current, None
        why = (
            "a shared incident is held: the tests on each variant's own traffic start anew, without its "
            "errors; the comparisons go on (gateway/rollout/incident.py)"
        )
        return tests.after_incident(current, plan, now), why
    if current is not None:
        why = "the settings that define the tests (or the candidate) changed"
    elif state.history and state.history[-1].reason in ("operator retry", "operator resume"):
        why = state.history[-1].reason
    else:
        why = "no saved evidence for this rollout (a new rollout, or its state was lost)"
    started = f"{why}; alpha {plan.alpha:.3%} per test over {list(plan.tests)}"
    return tests.start(plan, stage_of(state), now), started


def _measurable(checks: list[Check], carried: Carried) -> list[Check]:
    """Before any proxy connected, an error becomes a hold that keeps the provider's message; any other
    verdict stands (a probe's evidence against the checkpoint rolls back now)."""
    if carried.proxy_seen:
        return checks
    return [
        replace(check, verdict=Verdict.INCONCLUSIVE, reason=f"no proxy connected yet ({check.reason})")
        if check.verdict == Verdict.ERROR
        else check
        for check in checks
    ]
