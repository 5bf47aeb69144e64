"""The checks a spec's evidence gates (gateway/spec/approval.py) need beyond their own fields: they
share one margin, and the analysis can judge them."""

from __future__ import annotations

from gateway.spec.approval import EvidenceApproval, Margin
from gateway.spec.strategy import Analysis, Strategy


def evidence_margin(strategy: Strategy | None) -> Margin | None:
    """The margin of the strategy's evidence gates (one per rollout: `check_evidence_gates`), or None."""
    steps = strategy.steps if strategy is not None else []
    return next((s.approval.evidence for s in steps if isinstance(s.approval, EvidenceApproval)), None)


def check_evidence_gates(strategy: Strategy | None, analysis: Analysis) -> None:
    """ValueError naming the field where an evidence gate cannot be judged as the spec states it."""
    if strategy is None:
        return
    margin = evidence_margin(strategy)
    for i, step in enumerate(strategy.steps):
        where = f"strategy.steps.{i}.approval"
        if not isinstance(step.approval, EvidenceApproval):
            continue
        if step.approval.evidence != margin:
            raise ValueError(
                f"{where}: {step.approval.evidence.model_dump()} differs from the first evidence gate's "
                f"{margin.model_dump() if margin else None}: a rollout's evidence gates share one margin (one "
                "test runs for the whole rollout)"
            )
        if analysis.latency_source != "answers":
            raise ValueError(
                f"{where}: evidence needs analysis.latency_source: answers (the test ranks each answer's "
                "exact time; histogram buckets cannot show a 10 % margin)"
            )
        ratio = analysis.max_latency_ratio
        if ratio is not None and 1 + step.approval.evidence.max_slowdown >= ratio:
            raise ValueError(
                f"{where}.evidence.max_slowdown: {step.approval.evidence.max_slowdown:g} tolerates as much "
                f"as analysis.max_latency_ratio {ratio:g} rolls back at: set it below {ratio - 1:g}"
            )
        most = step.approval.evidence.max_error_rate
        if most is not None and most > analysis.max_error_rate:
            raise ValueError(
                f"{where}.evidence.max_error_rate: {most:g} is above analysis.max_error_rate "
                f"{analysis.max_error_rate:g}, which rolls back: set it at most that"
            )
