"""The answer-quality checks (issue 28), read from the rollout's evidence like the others. Pure.

  shadow_agreement  greedy shadow answers that differ from the baseline's, against max_disagreement
                    (the gateway's pairs, or graystack's servers' own comparison): passes once the
                    disagreement's anytime upper bound is below it
  structure         the candidate's malformed answers against the baseline's (gateway/quality/structure.py)
  judge             the candidate's losses among the judge's decisive verdicts, against max_loss
Each holds (inconclusive) with nothing to judge, and says why: a comparator that saw nothing is no pass.
"""

from __future__ import annotations

from gateway.rollout.evidence import fired
from gateway.rollout.plan import JUDGE, SHADOW_AGREEMENT, STRUCTURE, Plan
from gateway.rollout.sequential import RatioTest, ThresholdTest, error_rate_bounds
from gateway.rollout.verdicts import Check, Verdict, given

MIN_VERDICTS = 20  # the judge's verdicts (ties too) a shadow stage needs before the check can pass


def shadow_agreement(plan: Plan, test: ThresholdTest) -> Check:
    """Disagreements tested like errors, against 1 - min_shadow_agreement. A pass needs evidence of
    agreement: the disagreement's anytime confidence bound below the threshold."""
    most = given(plan.max_disagreement, "max_disagreement")
    agreed = test.requests - test.events
    lower, upper = error_rate_bounds(test.events, test.requests, plan.alpha, most)
    share = agreed / test.requests if test.requests else None
    counts = f"{agreed} of {test.requests} shadow answers equal the baseline's"
    if fired(test.log_evalue, plan.log_bound):
        verdict, bound, why = (
            Verdict.FAIL,
            1 - lower,
            f"disagreement above {most:.1%}: log e-value {test.log_evalue:.2f}",
        )
    elif upper < most:
        verdict, bound, why = (
            Verdict.PASS,
            1 - upper,
            f"disagreement below {most:.1%} with {1 - plan.alpha:.1%} confidence",
        )
    elif not test.requests:
        verdict, bound, why = (
            Verdict.INCONCLUSIVE,
            None,
            (
                "no shadow answer compared with the baseline's yet (greedy requests only; is the candidate "
                "started with `serve --compare-with`?)"
            ),
        )
    else:
        verdict, bound, why = (
            Verdict.INCONCLUSIVE,
            1 - upper,
            f"cannot tell the disagreement from {most:.1%} yet",
        )
    return Check(SHADOW_AGREEMENT, verdict, share, test.requests, bound, 1 - most, f"{counts}: {why}",
                 test.log_evalue, plan.log_bound)  # fmt: skip


def structure_check(plan: Plan, test: RatioTest, cuts: tuple[int, int, int, int]) -> Check:
    """Malformed answers (gateway/quality/structure.py) tested like errors against the baseline's. Only
    where answers are captured (a shadow stage, or `capture_percent` live); with none compared yet it
    holds: a form nobody checked is no pass."""
    most = given(plan.max_structure_ratio, "max_structure_ratio")
    ours, ours_cut, theirs, theirs_cut = cuts
    counts = (
        f"{test.candidate_events} of {test.candidate_requests} candidate answers malformed against "
        f"{test.baseline_events} of {test.baseline_requests} of the baseline's; cut at the token limit: "
        f"{ours_cut} of {ours} against {theirs_cut} of {theirs} (shown, not tested)"
    )
    if not test.candidate_requests:
        why = "no captured answers of both variants compared yet (is `analysis.quality` capturing any?)"
        return Check(
            STRUCTURE, Verdict.INCONCLUSIVE, None, 0, None, most, why, test.log_evalue, plan.log_bound
        )
    ratio = None
    if test.baseline_events:
        ratio = (test.candidate_events / test.candidate_requests) / (
            test.baseline_events / test.baseline_requests
        )
    failing = fired(test.log_evalue, plan.log_bound)
    reason = (
        f"malformed answers (empty, JSON or tool arguments that do not parse) "
        f"{'above' if failing else 'not shown above'} {most:g}x the baseline's: log e-value "
        f"{test.log_evalue:.2f} vs {plan.log_bound:.2f}; {counts}"
    )
    verdict = Verdict.FAIL if failing else Verdict.PASS
    return Check(STRUCTURE, verdict, ratio, test.candidate_requests, None, most, reason,
                 test.log_evalue, plan.log_bound)  # fmt: skip


def judge_check(plan: Plan, test: ThresholdTest, ties: int, problem: str | None) -> Check:
    """The judge's verdicts: fails once the candidate's loss share is shown above `max_loss`; passes once
    the judge gave MIN_VERDICTS verdicts without that (ties count: identical answers are a tie)."""
    most = given(plan.max_judge_loss, "max_judge_loss")
    verdicts = test.requests + ties
    share = test.events / test.requests if test.requests else None
    counts = f"the candidate lost {test.events} of {test.requests} decisive verdicts ({ties} ties)"
    if fired(test.log_evalue, plan.log_bound):
        verdict, why = Verdict.FAIL, f"losses above {most:.0%}: log e-value {test.log_evalue:.2f}"
    elif verdicts < MIN_VERDICTS:
        last = f"; the judge's last call: {problem}" if problem else ""
        verdict, why = Verdict.INCONCLUSIVE, f"{verdicts} of the {MIN_VERDICTS} verdicts a pass needs{last}"
    else:
        verdict, why = Verdict.PASS, f"no evidence of losses above {most:.0%}"
    return Check(
        JUDGE, verdict, share, verdicts, None, most, f"{counts}: {why}", test.log_evalue, plan.log_bound
    )
