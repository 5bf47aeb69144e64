"""Load shapes for Locust. Locust asks a shape every second for (users, spawn rate); None ends the run.
The shape classes read their plan (loadtests/plans.py) from the environment, on the master in
distributed mode; the locustfile picks one with LOAD_SHAPE."""

from __future__ import annotations

import os

from locust import LoadTestShape

from loadtests.plans import SoakPlan, StepPlan


class PlannedShape(LoadTestShape):
    """A shape that follows a plan read from the environment when Locust creates it."""

    abstract = True
    plan_type: type[SoakPlan] | type[StepPlan]

    def __init__(self) -> None:
        super().__init__()
        self.plan = self.plan_type.from_env(dict(os.environ))

    def tick(self) -> tuple[int, float] | None:
        return self.plan.tick(self.get_run_time())


class SoakShape(PlannedShape):
    """SOAK_USERS (20), ramped over SOAK_RAMP (10s), held for SOAK_DURATION (1h; e.g. 72h)."""

    plan_type = SoakPlan


class StepShape(PlannedShape):
    """STEP_STAGES (`1m:5,1m:10,1m:20,1m:40`), STEP_SPAWN_RATE (5 users/s)."""

    plan_type = StepPlan


SHAPES = {"soak": SoakShape, "step": StepShape}
