"""The gates a stage must pass before the rollout moves on, beyond its hold and checks: pure, like the
machine (gateway/rollout/machine.py) that asks them.

- The shadow gate: the shadowed candidate's success rate and latency ratio against `shadow.gate`.
- A step's gates, which stand before the step is taken (its weight applied), once the previous stage's
  hold and checks passed. First its `webhooks`: the machine asks the controller to call them
  (`CallWebhooks`) and holds; the controller feeds the answer back (`WebhookOutcome`, kept in the state
  for the stage). A 2xx from each lets the step go; a failure holds (and is called again after
  `WEBHOOK_RETRY`) or, with `on_failure: rollback`, rolls back. Then its `approval: manual`: the stage
  holds, awaiting `approve` (`state.awaiting`), which takes the step at once: the approver saw the last
  look's checks pass. `approval: evidence` lets the step go by itself once the candidate is shown not
  worse than the baseline by the spec's margin (gateway/rollout/not_worse.py); until then it awaits
  `approve` as a manual gate does, its reason saying how far each part of the evidence stands. An operator `promote` passes every gate (the operator's override, as it passes
  the capacity gate).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.rollout.analysis import Check, by_name
from gateway.rollout.checks.errors import ERROR_RATE
from gateway.rollout.checks.latency import TTFT_VS_BASELINE
from gateway.rollout.evidence import candidate_errors
from gateway.rollout.not_worse import Judgement, judge
from gateway.rollout.outcome import Outcome, Reason
from gateway.rollout.plan import plan_for
from gateway.rollout.rollout_state import ADVANCING, Action, CallWebhooks, Phase, RolloutState, WebhookOutcome
from gateway.spec.approval import EvidenceApproval
from gateway.spec.model import RolloutSpec, SpecError
from gateway.spec.strategy import Gate

WEBHOOK_RETRY = 30.0  # seconds a failed webhook holds the step before it is called again


@dataclass(frozen=True)
class Shut:
    """A step gate that holds: the decision's outcome, and the cause where it rolls back instead."""

    outcome: Outcome
    rollback: str | None = None


def next_step(state: RolloutState) -> int:
    """The step the rollout takes next from an advancing phase (the steps' length: promotion)."""
    return 0 if state.phase == Phase.SHADOW else state.step + 1


def record(state: RolloutState, answer: WebhookOutcome | None) -> RolloutState:
    """The state with the webhooks' answer, where it is for the step this stage leads to."""
    if answer is None or state.phase not in ADVANCING or answer.step != next_step(state):
        return state
    return replace(state, webhook=answer)


def step_gate(
    spec: RolloutSpec, state: RolloutState, now: float, actions: list[Action]
) -> tuple[RolloutState, Shut | None]:
    """Whether the next step may be taken now that the stage's hold and checks passed (None: it may)."""
    steps = spec.strategy.steps if spec.strategy else []
    index = next_step(state)
    if index >= len(steps):
        return state, None
    target = steps[index]
    if target.webhooks:
        answer = state.webhook if state.webhook is not None and state.webhook.step == index else None
        stale = answer is not None and not answer.ok and now - answer.at >= WEBHOOK_RETRY
        if answer is None or stale:
            actions.append(CallWebhooks(index))
        if answer is None:
            return state, Shut(Outcome(Reason.CALLING_WEBHOOKS, step=index))
        if not answer.ok:
            if answer.rollback:
                cause = f"webhook before step {index}: {answer.reason}"
                return state, Shut(Outcome(Reason.ROLLED_BACK), rollback=cause)
            failed = Outcome(Reason.WEBHOOK_FAILED, step=index, limit=WEBHOOK_RETRY, cause=answer.reason)
            return state, Shut(failed)
    if target.approval is None:
        return state, None
    outcome = Outcome(Reason.AWAITING_APPROVAL, step=index, weight=target.weight)
    if isinstance(target.approval, EvidenceApproval):
        judgement = evidence_judgement(spec, state)
        if judgement is not None and judgement.shown:
            return state, None
        unshown = tuple(part.name for part in judgement.parts if not part.shown) if judgement else ()
        summary = judgement.summary() if judgement else "no evidence yet"
        outcome = replace(outcome, reason=Reason.EVIDENCE_GATE, checks=unshown, cause=summary)
    return replace(state, awaiting=index), Shut(outcome)


def evidence_judgement(spec: RolloutSpec, state: RolloutState) -> Judgement | None:
    """How far the candidate is shown not worse, for an evidence gate (None: no such gate, or no
    tests of the spec's plan yet)."""
    evidence = state.evidence
    try:
        plan = plan_for(spec)
    except SpecError:
        return None
    errors = candidate_errors(evidence) if evidence is not None and evidence.plan == plan.key else None
    if evidence is None or errors is None:
        return None
    return judge(plan, evidence.not_worse, errors)


def approval_problem(state: RolloutState) -> str | None:
    """Why `approve` cannot apply now (None: a step awaits it)."""
    if state.phase not in ADVANCING or state.awaiting is None or state.awaiting != next_step(state):
        return "no step awaits approval (a manual gate waits only once its stage's hold and checks passed)"
    if state.paused:
        return "paused: resume first; the gate is judged again at the next look"
    return None


def shadow_gate_missed(gate: Gate, checks: tuple[Check, ...]) -> Outcome | None:
    """Why the shadow gate stays shut (naming the check it missed on), or None when the variant may
    take real traffic."""
    named = by_name(checks)
    rate, ratio = named.get(ERROR_RATE), named.get(TTFT_VS_BASELINE)
    if rate is None or rate.value is None:
        return _shadow_miss(ERROR_RATE, "no error-rate value")
    success = 1.0 - rate.value
    if success < gate.success_rate:
        return _shadow_miss(ERROR_RATE, f"success rate {success:.4f} below {gate.success_rate}")
    if ratio is None:
        return None  # latency comparisons are off (max_latency_ratio: null)
    if ratio.value is None:
        return _shadow_miss(TTFT_VS_BASELINE, "no latency ratio yet (mean TTFT of both variants this stage)")
    if ratio.value > gate.max_latency_ratio:
        return _shadow_miss(
            TTFT_VS_BASELINE, f"latency ratio {ratio.value:.3f} above {gate.max_latency_ratio}"
        )
    return None


def _shadow_miss(check: str, cause: str) -> Outcome:
    return Outcome(Reason.SHADOW_GATE, checks=(check,), cause=cause)
