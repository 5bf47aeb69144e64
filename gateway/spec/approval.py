"""A step's `approval: evidence` gate and its margin (docs/rollouts-and-analysis.md, "Step gates").

`approval: evidence` (or `approval: {evidence: {max_slowdown: 0.05}}` for another margin) approves the
step by itself once non-inferiority is shown (gateway/rollout/not_worse.py): the candidate's TTFT and
inter-token latency at most `1 + max_slowdown` times the baseline's in distribution, and its error
rate below `max_error_rate`; until then it waits for `graystack approve` like `approval: manual`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gateway.spec.fields import SpecModel

DEFAULT_MAX_SLOWDOWN = 0.1


class Margin(SpecModel):
    """How much worse the candidate may be and still be approved."""

    # TTFT and inter-token latency at most (1 + max_slowdown) x the baseline's, in distribution
    max_slowdown: float = Field(default=DEFAULT_MAX_SLOWDOWN, gt=0, le=1)
    # the candidate's error rate shown below it (None: analysis.max_error_rate)
    max_error_rate: float | None = Field(default=None, gt=0, lt=1)


class EvidenceApproval(SpecModel):
    """`approval: evidence`, or `approval: {evidence: {...margin}}`."""

    evidence: Margin = Margin()

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if value == "evidence":
            return {"evidence": {}}
        if isinstance(value, str):
            raise ValueError(
                f"{value!r} is not a gate: manual, evidence, or {{evidence: {{max_slowdown: 0.1}}}}"
            )
        if isinstance(value, dict) and value.get("evidence", {}) is None:
            return {**value, "evidence": {}}  # `approval: {evidence: }` in YAML
        return value
