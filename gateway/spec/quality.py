"""The spec's `analysis.quality`: which answers the data plane keeps, and the comparators' settings.

Answers can hold personal data, so nothing is kept without this section: no `quality`, and Envoy's answer
filter reads no answer text (gateway/envoy/capture.py). With it, a shadow stage keeps every mirrored copy
and its original (`shadow`, default on), and live traffic outside the shadow stage only `capture_percent`
of it (default 0: off). `max_answer_bytes` caps the text kept per answer, in Envoy: bytes past it never
leave the proxy. The comparators' settings (`max_greedy_disagreement`, `structure`, `judge`) are validated
here and carried in the spec for the comparator tests (issue 28, item 2).

No file is read here: the spec is validated where it is written too (`graystack weight --configmap` on an
operator's machine), where the judge's prompt file need not exist. The gateway reads it where the judge
runs (gateway/quality/judge.py `read_template`), against the rule `check_template` states here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.spec.fields import HttpUrl, PositiveDuration, SpecModel

# The answer filter samples a request by its x-request-id modulo this (gateway/envoy/capture.py).
PER_MILLION = 1_000_000
# What a judge's template must name once each; `{request}`, the request's text, where one is given.
ANSWER_PLACEHOLDERS = ("{first}", "{second}")


def check_template(template: str) -> str:
    """The template, if it names each of ANSWER_PLACEHOLDERS exactly once (and `{request}` at most once);
    ValueError naming what is wrong."""
    for placeholder in ANSWER_PLACEHOLDERS:
        if template.count(placeholder) != 1:
            raise ValueError(f"the judge's template must contain {placeholder} exactly once")
    if template.count("{request}") > 1:
        raise ValueError("the judge's template may contain {request} at most once")
    return template


class Judge(SpecModel):
    """An OpenAI-compatible endpoint shown both answers in random order; `max_loss`: the largest share of
    verdicts "candidate worse" the check tolerates; `budget_per_hour`: the judge's requests per hour."""

    url: HttpUrl  # its OpenAI-compatible base, e.g. http://judge:8000/v1
    model: str = Field(min_length=1)
    max_loss: float = Field(default=0.55, gt=0, lt=1)
    budget_per_hour: int = Field(default=200, ge=1)
    timeout: PositiveDuration = 30.0
    # A template file on the gateway, read and checked where the judge runs (gateway/quality/judge.py);
    # None: the built-in template.
    prompt: str | None = None


class Quality(SpecModel):
    """What is captured, and how answers are compared (docs/rollouts-and-analysis.md)."""

    capture_percent: float = Field(default=0.0, ge=0, le=100)
    max_answer_bytes: int = Field(default=16_384, ge=1, le=1_048_576)
    shadow: bool = True
    max_greedy_disagreement: float | None = Field(default=None, gt=0, lt=1)
    keep: Literal["text", "digest"] = "text"  # digest: only a SHA-256 of each answer stays in the gateway
    structure: bool = False
    max_structure_ratio: float = Field(default=2.0, ge=1)  # malformed answers vs the baseline's share
    # answers cut at the token limit vs the baseline's share (None: not tested, only shown beside structure)
    max_cut_ratio: float | None = Field(default=None, ge=1)
    judge: Judge | None = None

    @model_validator(mode="after")
    def _text_where_needed(self) -> Quality:
        if self.keep == "digest" and (self.structure or self.judge is not None):
            needs = "structure" if self.structure else "judge"
            raise ValueError(
                f"keep: digest keeps no text, and `{needs}` judges the text: keep: text, or drop {needs}"
            )
        return self

    @property
    def live_per_million(self) -> int:
        """The share of live requests whose answers are kept, per million (the filter's sampling unit)."""
        return round(self.capture_percent * PER_MILLION / 100)
