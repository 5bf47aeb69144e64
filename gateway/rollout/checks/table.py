"""The checks a rollout can run: the only place a check is registered. Pure.

The order is the order status lists them in, and the order of the first failing check a rollback is
named after. A new check is its own module (gateway/rollout/checks/base.py's protocol), a row here, its
spec fields and its docs; its tests' record joins `TestState`, the saved state's union.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from gateway.rollout.checks.agreement import AgreementTests, ShadowAgreement
from gateway.rollout.checks.base import CheckKind
from gateway.rollout.checks.error_ratio import ErrorRatio, RatioTests
from gateway.rollout.checks.errors import ErrorRate, ErrorTests
from gateway.rollout.checks.experiment import ExperimentRow, ExperimentTests
from gateway.rollout.checks.judge import Judge, JudgeTests
from gateway.rollout.checks.latency import ITL_COMPARISON, TTFT_COMPARISON, LatencyTests
from gateway.rollout.checks.length_cut import CutTests, LengthCut
from gateway.rollout.checks.slo import SloTests, TtftSlo
from gateway.rollout.checks.structure import Structure, StructureTests
from gateway.rollout.checks.weights import WeightStatus

CHECKS: tuple[CheckKind[Any, Any], ...] = (
    ErrorRate(),
    ErrorRatio(),
    TtftSlo(),
    TTFT_COMPARISON,
    ITL_COMPARISON,
    WeightStatus(),
    ShadowAgreement(),
    Structure(),
    LengthCut(),
    Judge(),
    ExperimentRow(),
)

# One row's tests as the saved state keeps them, told apart by their `kind`.
TestState = Annotated[
    ErrorTests
    | RatioTests
    | SloTests
    | LatencyTests
    | AgreementTests
    | StructureTests
    | CutTests
    | JudgeTests
    | ExperimentTests,
    Field(discriminator="kind"),
]

CHECK_NAMES = tuple(name for row in CHECKS for name in row.checks)
