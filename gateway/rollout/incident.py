"""A shared incident held under `analysis.on_shared_incident: hold`, and watched until it is over. Pure.

When every failing check is shared (the baseline fails the same test and the candidate is not shown
worse than it: gateway/rollout/checks/errors.py) and the spec says `hold`, the weights stay, the rollout
pauses (unless its operator had paused it already) and one alert pages. The incident's errors are in the
tests on each variant's own traffic, so those start anew (`IncidentWatch.tests_since`: the next look
restarts them, gateway/rollout/evidence.py `after_incident`; the machine never looks inside the
evidence); the comparisons go on. Then, look by look:
- quiet (no check failing or in error, and the error tests passing): the quiet period goes on. Once it
  has lasted `analysis.incident_clear`, the incident is over: `incident` clears, the pause the incident
  made lifts (the stage's hold timers run again from there; an operator's own pause stays theirs), and
  the decision says so (`Reason.SHARED_INCIDENT_CLEARED`). No stage ends during the hold, so the error
  test passes while it has not fired (no "extending" for the stage's size: gateway/rollout/look.py);
- not quiet: the quiet period restarts. New tests that fire shared again mean the incident goes on
  (`SHARED_INCIDENT_STANDING`, no new alert, never a rollback for it). An error test that fired but is
  not yet told whose, or a metrics error (which counts towards `on_error` as at any look), is not quiet
  either. The tests start over when they have run `incident_clear` (their errors are the incident's);
- a failure that is the candidate's alone rolls back, as at any look (machine.py).
An operator's `pause` during the hold is taken (not "already paused"): the pause is theirs from then on,
and stays when the incident is over; their `resume` ends the hold at once (`forget`). So does a freeze
(`on_error`) during the hold: a rollout that alerted does not move again unseen.

The price of new tests: each start gives a healthy candidate a new chance, at most the test's alpha, to
be rolled back by it; over the starts the union bound adds these up. Only the tests on each variant's
own traffic start anew, and of those a failure during the hold is the candidate's alone only where the
comparison says so (kept: its alpha spent once for the rollout) or the baseline had no traffic (no
shared incident is told then); the TTFT SLO's test, whose failure is the candidate's when the baseline's
copy has not fired, is the one whose starts spend its alpha again. Starting over at most once per
`incident_clear` bounds an incident of T seconds to 1 + T / incident_clear starts (13 for an hour at the
default 5 minutes), where starting at each shared look would have cost one per look. It is paid for:
with the old tests the incident's errors never leave them, and the rollout could not go on without an
operator.

A state saved before the watch existed (its `incident` set, no `incident_watch`) is watched from its
first look, its tests on each variant's own traffic started anew; its pause is the incident's when the
incident's hold was its last move (`reason` is the incident's), else the operator's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.rollout.checks.errors import ERROR_RATE, ERROR_RATE_CHANGE
from gateway.rollout.outcome import Outcome, Reason
from gateway.rollout.rollout_state import (
    ADVANCING,
    Action,
    Alert,
    IncidentWatch,
    RolloutState,
)
from gateway.rollout.stages import moved, pause
from gateway.rollout.verdicts import Check, Verdict, describe
from gateway.spec.model import RolloutSpec

ERROR_TESTS = (ERROR_RATE, ERROR_RATE_CHANGE)  # the absolute error tests, which must pass to be quiet


def shared_hold(spec: RolloutSpec, failing: Sequence[Check]) -> bool:
    """Every failing check is a shared incident, and the spec says to hold on those."""
    return bool(failing) and spec.analysis.on_shared_incident == "hold" and all(c.shared for c in failing)


def hold(
    spec: RolloutSpec, state: RolloutState, failing: Sequence[Check], now: float, actions: list[Action]
) -> tuple[RolloutState, Outcome]:
    """A look whose failures are all a shared incident's: the hold begins (an alert, a pause, new tests),
    or it stands and its quiet period restarts."""
    if state.incident is not None:
        return _unquiet(spec, state, now), Outcome(Reason.SHARED_INCIDENT_STANDING)
    cause = "; ".join(describe(c) for c in failing)
    actions.append(Alert(f"shared incident, weights held at {state.weight}%: {cause}"))
    reason = f"held: shared incident: {cause}"
    ours = state.phase in ADVANCING and not state.paused
    if ours:
        state = pause(state, now, reason)
    watch = IncidentWatch(tests_since=now, quiet_since=now, paused=ours)
    return replace(state, incident=reason, incident_watch=watch), Outcome(Reason.SHARED_INCIDENT)


def watch(
    spec: RolloutSpec, state: RolloutState, checks: Sequence[Check], now: float
) -> tuple[RolloutState, Outcome | None]:
    """A look without a failure while an incident is held: the quiet period goes on, restarts, or has
    lasted `incident_clear` and the incident is over. Outcome None: a metrics error, which the machine
    judges as at any look (after the quiet period restarted)."""
    if any(c.verdict == Verdict.ERROR for c in checks):
        return _unquiet(spec, state, now), None
    state = replace(state, errors=0)
    if not quiet(checks):
        return _unquiet(spec, state, now), Outcome(Reason.SHARED_INCIDENT_STANDING)
    state, current = _watched(state, now)
    waited, limit = now - current.quiet_since, spec.analysis.incident_clear
    if waited < limit:
        return state, Outcome(Reason.SHARED_INCIDENT_CLEARING, seconds=waited, limit=limit)
    over = Outcome(Reason.SHARED_INCIDENT_CLEARED, seconds=waited, limit=limit)
    state = replace(state, incident=None, incident_watch=None)
    if not (current.paused and state.paused):  # an operator's pause, and its reason, stay
        return state, over
    resumed = {"paused": False, "held_until": now, "capacity_since": None}
    return moved(state, now, f"shared incident over: new tests quiet for {waited:.0f}s", **resumed), over


def quiet(checks: Sequence[Check]) -> bool:
    """No check failing or in error, and the absolute error tests passing (an empty look is not quiet)."""
    verdicts = {c.name: c.verdict for c in checks}
    calm = bool(checks) and all(v not in (Verdict.FAIL, Verdict.ERROR) for v in verdicts.values())
    return calm and all(verdicts.get(name, Verdict.PASS) == Verdict.PASS for name in ERROR_TESTS)


def paused_it(state: RolloutState) -> bool:
    """The rollout is paused by a held incident's hold (not by its operator)."""
    return state.paused and state.incident_watch is not None and state.incident_watch.paused


def take_pause(state: RolloutState) -> RolloutState:
    """An operator paused the rollout during a held incident: the pause is theirs now, not lifted when
    the incident is over."""
    current = state.incident_watch
    if current is None:
        return state
    return replace(state, incident_watch=replace(current, paused=False))


def forget(state: RolloutState) -> RolloutState:
    """No incident held, and new tests (an operator's resume or retry)."""
    return replace(state, evidence=None, incident=None, incident_watch=None)


def _unquiet(spec: RolloutSpec, state: RolloutState, now: float) -> RolloutState:
    """The quiet period restarts; the tests too, once they have run `incident_clear`."""
    state, current = _watched(state, now)
    if now - current.tests_since >= spec.analysis.incident_clear:
        current = replace(current, tests_since=now)
    return replace(state, incident_watch=replace(current, quiet_since=now))


def _watched(state: RolloutState, now: float) -> tuple[RolloutState, IncidentWatch]:
    """`state` with its incident's watch; a state saved before watches gets one from `now`, its tests
    started anew (module docstring)."""
    if state.incident_watch is not None:
        return state, state.incident_watch
    ours = state.paused and state.reason == state.incident
    adopted = IncidentWatch(tests_since=now, quiet_since=now, paused=ours)
    return replace(state, incident_watch=adopted), adopted
