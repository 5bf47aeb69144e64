"""What a check is, and what every check reads: the `CheckKind` protocol, the plan they run under, and
the look's moment. Pure.

A check kind is a row (gateway/rollout/checks/table.py): it says from the spec whether it runs and
with what settings (`Off` with the reason where it does not), keeps its sequential tests in one frozen
record (its `kind` names it in the saved state), adds each look's increments to them, and reads its
verdicts from them. `Plan`, `Evidence` and the analysis loop over the table, so a new check is a new
module and a row, not a field in five records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gateway.rollout.increments import VariantLook
from gateway.rollout.verdicts import Check
from gateway.spec.approval import Margin
from gateway.spec.model import RolloutSpec

S = TypeVar("S")  # a check's settings
T = TypeVar("T")  # its tests' state


@dataclass(frozen=True)
class Off:
    """A check that does not run, and why (status shows it)."""

    why: str


@dataclass(frozen=True)
class Plan:
    """Which checks run, with what settings, at what level (gateway/rollout/plan.py builds it)."""

    baseline: str
    candidate: str
    tests: tuple[str, ...]  # the budgeted tests that run (each at `alpha`)
    off: tuple[tuple[str, str], ...]  # (check, why it does not run)
    settings: Mapping[str, Any]  # row name -> its settings, for each row that runs (table.py)
    alpha: float
    max_error_rate: float  # the rollout's error threshold (the stage sizes and an evidence gate read it)
    exact_latency: bool  # latency is read from the answers' exact values, not from histograms
    client_units: bool  # cohorts assign clients: the tests count each client once (metrics/client_units.py)
    randomised_segments: frozenset[str]  # segments whose traffic is split at random between the two
    log_bound: float  # log(1/alpha): a budgeted test fires at or above it
    log_detector_bound: float  # log A of the change detectors
    stage_requests: int  # candidate requests a stage needs before it may end
    key: str  # identity of the tests: another key starts new ones
    not_worse: Margin | None = None  # an evidence gate's margin, max_error_rate resolved (None: no such gate)


@dataclass(frozen=True)
class Moment:
    """What a verdict reads besides its tests: the stage so far, and what the probes and the judge said
    of the candidate this look."""

    stage_observations: int = 0  # the candidate's requests (clients, with cohorts) this stage
    latency_ratio: float | None = None  # its mean TTFT over the baseline's, this stage
    shadowing: bool = False  # a shadow stage: the copies' comparators report
    advancing: bool = True  # a stage that ends on evidence (not promoted, manual or rolled back)
    weight_status: Sequence[str] = ()  # its probes' statuses
    effective_windows: Sequence[int] = ()  # its model servers' effective windows
    mismatches: Sequence[str] = ()  # its probes' findings that their server did not load their file
    judge_problem: str | None = None  # why the judge's last call gave no verdict


class CheckKind(Protocol[S, T]):
    """One row of the table. `name` keys its settings in the plan and its tests in the evidence."""

    @property
    def name(self) -> str: ...

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks it reports (its name first), in the order status lists them."""
        ...

    @property
    def signals(self) -> tuple[str, ...]:
        """The observation signals it reads (gateway/metrics/observations.py)."""
        ...

    @property
    def budgeted(self) -> bool:
        """Whether it spends a share of the false-rollback budget (a test that can fail a rollout)."""
        ...

    @property
    def detectors(self) -> int:
        """Change detectors it runs, which share the mean time between false alarms."""
        ...

    def settings(self, spec: RolloutSpec) -> S | Off: ...

    def identity(self, spec: RolloutSpec) -> Mapping[str, Any]:
        """What of the spec defines its tests, merged into the plan's key (another value starts new
        tests; a field absent until set keeps the keys of states saved before it existed)."""
        ...

    def start(self, settings: S) -> T: ...

    def add(self, tests: T, settings: S, plan: Plan, ours: VariantLook, theirs: VariantLook) -> T:
        """`tests` with one look of the candidate (`ours`) and the baseline (`theirs`) added."""
        ...

    def verdicts(self, tests: T, settings: S, plan: Plan, moment: Moment) -> Sequence[Check]:
        """Its checks this look (none where it does not report in this stage)."""
        ...
