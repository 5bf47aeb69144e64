"""Conversations through the real Envoy (bench/prefix_reuse.py's harness, the locustfile's
ConversationUser as the load): with cohorts every turn after a conversation's first reaches the variant of
the turn before; with a random 50/50 split about half do. Each configuration runs until Envoy has sent
enough requests for 100 turns after a conversation's first (4 turns each: 3 of every 4 requests), bounded
for a machine half as fast, not for a fixed time."""

from __future__ import annotations

from scipy.stats import binomtest

from bench.prefix_reuse import measure


def test_cohorts_keep_every_turn_on_its_variant_and_a_random_split_about_half(tmp_path, envoy_binary):
    results = measure(["random", "cohorts"], users=8, seconds=120, turns=4, workdir=tmp_path, requests=160)
    for name, result in results.items():
        assert result["failures"] == 0, f"{name}: {result}"
        assert result["turns_after_first"] >= 100, f"{name}: too few turns to judge: {result}"
    cohorts = results["cohorts"]
    assert cohorts["same_variant"] == cohorts["turns_after_first"], cohorts
    random = results["random"]
    p = binomtest(random["same_variant"], random["turns_after_first"], 0.5).pvalue
    assert p > 0.001, (
        f"random split: {random['same_variant_share']:.1%} of turns on their variant (p = {p:.2g})"
    )
