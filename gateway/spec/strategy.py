"""The spec's rollout parts: the strategy's stages and the analysis that guards them
(docs/spec-and-routing.md; how the analysis decides: gateway/rollout/evidence.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gateway.spec.approval import EvidenceApproval
from gateway.spec.fields import Duration, HttpUrl, Percent, PositiveDuration, SpecModel
from gateway.spec.quality import Quality
from gateway.spec.queries import LatencySignal, check_overrides


class Gate(SpecModel):
    success_rate: float = Field(default=0.995, ge=0, le=1)
    max_latency_ratio: float = Field(default=1.0, gt=0)


class Shadow(SpecModel):
    percent: Percent = 100
    duration: Duration = 300.0
    gate: Gate = Gate()


class Webhook(SpecModel):
    """A URL called before a step is taken (an evaluation job, a load test, a change freeze): a 2xx
    answer lets the step go; anything else, a timeout included, holds it or rolls back (`on_failure`)."""

    url: HttpUrl
    timeout: PositiveDuration = 10.0
    on_failure: Literal["hold", "rollback"] = "hold"


class Step(SpecModel):
    """A stage of the strategy. Its gates stand before the step is taken (its weight applied), once the
    previous stage's hold and checks passed: the webhooks first, then the approval (docs/rollouts-and-analysis.md)."""

    weight: Percent  # the candidate's share; with several candidates, each one's unless `weights` names it
    # With several candidates (issue 38): a candidate's own share at this step, over `weight`.
    weights: dict[str, Percent] = {}
    hold: Duration = 0.0
    # manual: wait for `graystack approve`; evidence: approved once shown not worse (gateway/spec/approval.py)
    approval: Literal["manual"] | EvidenceApproval | None = None
    webhooks: list[Webhook] = []

    def share(self, candidate: str) -> int:
        """`candidate`'s share of the default split at this step."""
        return self.weights.get(candidate, self.weight)


class Experiment(SpecModel):
    """A fixed split held for `duration`, or until every difference it reports is decided (issue 38;
    gateway/rollout/checks/experiment.py): it never promotes by itself, and the guard still rolls back.
    `alpha` bounds the chance that any interval it reports ever misses its true value."""

    weights: dict[str, Percent]
    duration: PositiveDuration
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    end_on_decision: bool = True
    # The share of the baseline's requests Envoy copies to the candidate, for the pairs that greedy
    # agreement and the judge compare (gateway/answers/pairs.py); 0: none, and those intervals stay empty.
    mirror_percent: Percent = 0

    @field_validator("weights")
    @classmethod
    def _sums_to_100(cls, weights: dict[str, int]) -> dict[str, int]:
        total = sum(weights.values())
        if total != 100:
            raise ValueError(f"weights must sum to 100, got {total}")
        return weights

    def check_split(self, variants: list[str], baseline: str | None) -> None:
        """ValueError unless the split names the baseline and gives it and every other variant (each a
        candidate compared with it, gateway/rollout/candidates.py) a share above 0."""
        where = "strategy.experiment.weights"
        unknown = sorted(set(self.weights) - set(variants))
        if unknown:
            raise ValueError(f"{where}: unknown variant(s) {unknown}; the spec defines {sorted(variants)}")
        if baseline is None:
            raise ValueError(
                f"{where}: an experiment compares with a baseline: set retries.fallback or name a variant `baseline`"
            )
        unserved = [v for v in variants if self.weights.get(v, 0) == 0]
        if baseline in unserved:
            raise ValueError(
                f"{where}: the baseline {baseline!r} needs a share above 0 (the experiment compares with it)"
            )
        if unserved:
            raise ValueError(
                f"{where}: give every candidate a share above 0 ({unserved} have none): the experiment "
                "compares each variant with the baseline; drop a variant from `variants` to leave it out"
            )

    def candidate_weight(self, baseline: str) -> int:
        """The candidate's share, in a rollout of one candidate: all but the baseline's."""
        return 100 - self.weights[baseline]


class Strategy(SpecModel):
    """Steps (with an optional shadow stage before them), or one experiment."""

    shadow: Shadow | None = None
    steps: list[Step] = []
    experiment: Experiment | None = None

    @model_validator(mode="after")
    def _steps_or_experiment(self) -> Strategy:
        if self.experiment is None and not self.steps:
            raise ValueError("name `steps` (at least one) or an `experiment`")
        if self.experiment is not None and (self.steps or self.shadow is not None):
            raise ValueError("experiment: holds one split; leave out `steps` and `shadow`")
        return self


MetricName = Annotated[str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")]


class Provider(SpecModel):
    type: Literal["direct", "prometheus"] = "direct"
    url: str | None = None
    # PromQL replacing the prometheus provider's built-in queries by name (gateway/spec/queries.py).
    queries: dict[str, str] | None = None
    # The servers' TTFT and per-request time-per-output-token histograms by base name, where they are
    # neither graystack's nor vLLM's (both providers read those by default): e.g. {ttft: my_ttft_seconds}.
    histograms: dict[LatencySignal, MetricName] | None = None

    @field_validator("queries")
    @classmethod
    def _known_queries(cls, queries: dict[str, str] | None) -> dict[str, str] | None:
        if queries is not None:
            check_overrides(queries)
        return queries

    @model_validator(mode="after")
    def _prometheus_needs_a_url(self) -> Provider:
        if self.type == "prometheus" and not self.url:
            raise ValueError("the prometheus provider needs `url`, e.g. http://prometheus:9090")
        return self


class Analysis(SpecModel):
    """How the guard decides (gateway/rollout/evidence.py; docs/rollouts-and-analysis.md).

    Decisions are anytime-valid sequential tests over the whole rollout, so the user states how often
    the guard may be wrong, not how many requests a window holds: `false_rollback_budget` bounds the
    chance that a healthy candidate is ever rolled back by the rollout's tests (split evenly across the
    tests that run), `mean_time_between_false_alarms` bounds the change detector that guards after
    100 %, and `min_detectable_error_rate` is the smallest regression a stage must be able to catch
    before it ends (it sets each stage's minimum candidate requests). Any check is off with null.
    `window` and `min_requests` serve dashboards only; no decision reads them.
    """

    interval: Duration | None = None  # seconds between looks; None: 1 s for `direct`, 5 s for `prometheus`
    window: Duration = 60.0
    min_requests: int = Field(default=100, ge=1)
    max_error_rate: float = Field(default=0.003, gt=0, lt=1)
    false_rollback_budget: float = Field(default=0.01, gt=0, lt=0.5)
    mean_time_between_false_alarms: Duration = 90 * 86400.0
    min_detectable_error_rate: float = Field(default=0.01, gt=0, lt=1)
    # Candidate errors against the baseline's: at most this many times the baseline's rate (None: off).
    max_error_ratio: float | None = Field(default=2.0, ge=1)
    # Candidate TTFT and inter-token latency at most this many times the baseline's, in distribution
    # (None: off), within each prompt bucket; tested, with the TTFT SLO, on `latency_source`: the exact
    # time of every answer the gateway measured (any server), or the servers' histogram buckets (or the
    # probes'), which a gateway whose answers cannot reach it may still judge on.
    max_latency_ratio: float | None = Field(default=1.2, gt=1)
    latency_source: Literal["answers", "histograms"] = "answers"
    max_ttft_p95: Duration | None = 2.0
    on_shared_incident: Literal["rollback", "hold"] = "rollback"
    # Under `hold`: how long new tests must stay quiet (no check failing, the error tests passing) before
    # a held shared incident is over and the rollout goes on by itself (gateway/rollout/incident.py).
    incident_clear: PositiveDuration = 300.0
    expected_weight_status: list[Literal["ACTIVE", "ZEROED", "ERASED"]] | None = ["ERASED", "ZEROED"]
    # Zero-layer pods must serve a bias that is zero past this distance (their model servers'
    # graystack_model_info effective_window): tells the derived sparse ACTIVE form (64 on the trained
    # default model) from an ACTIVE bias spanning the whole context. None: not checked.
    max_effective_window: int | None = Field(default=None, ge=0)
    # The share of shadow copies whose greedy answer must equal the baseline's (inference/server/outputs.py);
    # None: not checked. Tested like the error rate, on the disagreements.
    min_shadow_agreement: float | None = Field(default=None, gt=0, lt=1)
    # Answer capture and the comparators (gateway/spec/quality.py); None: no answer content is kept anywhere.
    quality: Quality | None = None
    provider: Provider = Provider()
    # When the metrics stay unreadable past the retry limit: hold the weights and alert (freeze),
    # or treat it as a failure (rollback). Freeze is the default: an outage of the metrics source
    # is not evidence against the variant.
    on_error: Literal["freeze", "rollback"] = "freeze"

    @model_validator(mode="after")
    def _budgets_that_work(self) -> Analysis:
        if self.interval is not None and self.interval <= 0:
            raise ValueError("interval: must be above 0 (omit it for the provider's default)")
        if self.min_detectable_error_rate <= self.max_error_rate:
            raise ValueError(
                f"min_detectable_error_rate ({self.min_detectable_error_rate:g}) must be above "
                f"max_error_rate ({self.max_error_rate:g}): no test can catch a regression at its threshold"
            )
        looks = self.mean_time_between_false_alarms / self.look_interval
        if looks < 1000:
            raise ValueError(
                f"mean_time_between_false_alarms ({self.mean_time_between_false_alarms:g}s) must span at "
                f"least 1000 looks of {self.look_interval:g}s: the change detector would alarm on healthy traffic"
            )
        return self

    @property
    def look_interval(self) -> float:
        """Seconds between looks: looks cost nothing statistically, so as often as the source refreshes."""
        if self.interval is not None:
            return self.interval
        return 1.0 if self.provider.type == "direct" else 5.0
