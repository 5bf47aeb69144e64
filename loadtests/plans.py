"""The load shapes' plans: pure functions of the elapsed time, read from the environment, so they are
tested without Locust (importing Locust monkey-patches the whole process with gevent)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.spec.fields import parse_duration
from loadtests.config import Stage, parse_stages


@dataclass(frozen=True)
class SoakPlan:
    """Ramp to `users` over `ramp` seconds, then hold them for `hold` seconds (72 h for the reference run)."""

    users: int
    ramp: float
    hold: float

    def tick(self, elapsed: float) -> tuple[int, float] | None:
        if elapsed >= self.ramp + self.hold:
            return None
        return self.users, self.users / self.ramp if self.ramp > 0 else float(self.users)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> SoakPlan:
        return cls(
            users=int(env.get("SOAK_USERS") or "20"),
            ramp=parse_duration(env.get("SOAK_RAMP") or "10s"),
            hold=parse_duration(env.get("SOAK_DURATION") or "1h"),
        )


@dataclass(frozen=True)
class StepPlan:
    """Stages in order, each holding its user count for its duration; users change at `spawn_rate`/s."""

    stages: tuple[Stage, ...]
    spawn_rate: float

    def tick(self, elapsed: float) -> tuple[int, float] | None:
        end = 0.0
        for stage in self.stages:
            end += stage.seconds
            if elapsed < end:
                return stage.users, self.spawn_rate
        return None

    @classmethod
    def from_env(cls, env: dict[str, str]) -> StepPlan:
        stages = parse_stages(env.get("STEP_STAGES") or "1m:5,1m:10,1m:20,1m:40")
        return cls(tuple(stages), float(env.get("STEP_SPAWN_RATE") or "5"))
