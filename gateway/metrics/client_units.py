"""Clients as the unit of the rollout's tests, once cohorts (`routing.affinity`) assign them.

Without cohorts each request's variant is drawn at random, so requests are independent draws and every
answer is an observation. With cohorts a client's requests all go to one variant, and a client is not a
random request: a heavy user, a bot whose prompts fail, a user on a slow network. Counted per request,
the cohorts' make-up becomes evidence: a 5 % cohort that happens to hold one bot failing 5 % of its many
requests "fails" however healthy the candidate (bench/client_rules.py measures how often). So each client
enters each variant's tests once per stage, with its first answer there (`take`); answers without a
key, split at random, all count as before.

Why this and not the client's every answer summed per look: a client's answers in later looks repeat
its traits, so a test that keeps adding them converges on the cohort's make-up, not on the variant's
effect, and fires on a healthy candidate given time. Its first answer is a fresh draw: the cohort is a
hash of the key, independent of the client's traits, so under "the candidate is healthy" a stage's first
answers on each variant are independent draws from the population, and every test keeps its guarantee
within the stage. Across stages a client counts again (the controller calls `restart` when the stage
changes or the tests start over): at most once per stage, four times over the seed's rollout, where
per-request counting repeats a heavy client thousands of times; bench/client_rules.py shows the budget
holding over the seed's week. Counting once per rollout instead would leave the live stages blind after
the shadow stage, which mirrors every client to the candidate. The price is information: within a stage
a late regression is seen in clients new to it (and in unkeyed answers), and a stage needs its
`stage_requests` in clients; BENCHMARKS.md has the detection times against per-request counting. A
restarted gateway or a new leader, which keep the saved tests but not this memory, lets each client
count once more in the stage.

Bounded: at most `limit` clients per variant are remembered; a client beyond it is left out of the
tests (fewer observations, never a repeated one) and counted in `overflow`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from gateway.answers.answer import Answer

LIMIT = 2_000_000  # clients remembered per variant: a set of 64-bit digests, ~100 MB at the limit


class ClientUnits:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.overflow = 0
        self._counted: defaultdict[str, set[int]] = defaultdict(set)

    def take(self, answers: Iterable[Answer]) -> list[Answer]:
        """The answers that are observations: every unkeyed one, and each client's first on a variant."""
        kept = []
        for answer in answers:
            if answer.client is not None:
                counted = self._counted[answer.variant]
                if answer.client in counted:
                    continue
                if len(counted) >= self.limit:
                    self.overflow += 1
                    continue
                counted.add(answer.client)
            kept.append(answer)
        return kept

    def restart(self) -> None:
        self._counted.clear()
