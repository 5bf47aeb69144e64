"""With cohorts, heterogeneous clients over the seed's week: per-request counting rolls back a healthy
candidate more often than the budget allows, counting each client once per stage does not
(bench/client_rules.py simulates both through the shipped tests' kernels; BENCHMARKS.md has the full run).

A fixed seed and enough rollouts that the two countings' shares are told apart by an exact test, and the
per-request share's lower confidence bound sits above the budget: the simulation is deterministic, and
these bounds say its outcome is not a lucky draw.
"""

from __future__ import annotations

from scipy.stats import binomtest, fisher_exact

from bench.client_rules import false_rollbacks
from bench.shipped_rules import seed_plan

ROLLOUTS = 100


def test_per_request_counting_exceeds_the_false_rollback_budget_and_client_counting_keeps_it():
    plan = seed_plan()
    budget = plan.alpha * len(plan.tests)
    rows = {row["counting"]: row for row in false_rollbacks(20, ROLLOUTS, seed=27)}
    fired = {counting: round(row["share"] * ROLLOUTS) for counting, row in rows.items()}
    per_request = binomtest(fired["per_request"], ROLLOUTS).proportion_ci(0.95).low
    assert per_request > budget, fired
    assert fired["clients"] / ROLLOUTS <= budget, fired
    table = [
        [fired["per_request"], ROLLOUTS - fired["per_request"]],
        [fired["clients"], ROLLOUTS - fired["clients"]],
    ]
    assert fisher_exact(table, alternative="greater").pvalue < 0.01, fired
