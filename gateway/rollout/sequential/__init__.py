"""Anytime-valid statistics for rollback decisions (docs/rollouts-and-analysis.md).

Every test here is an e-process: a nonnegative (super)martingale under "the candidate is healthy", so by
Ville's inequality P(its log ever reaches log(1/alpha)) <= alpha however often the controller looks, with
weights changed from the data and looks of any size. That is what the old sliding-window rules lacked
(research §1). The controller feeds each look's count increments, persists the returned state (frozen,
JSON-able through to_dict/from_dict) and compares `log_evalue` with `alpha_log_threshold(alpha)`, or
`ThresholdTest.log_detector` with `detector_log_threshold(...)`.

The per-look arithmetic lives in batched kernels (`threshold_look`, `ratio_look`, `shift_look`, `rank_increments`, leading
axes = independent runs): the states call them with one run, simulations with thousands, so what is
simulated is what ships.

Why not a library: PyPI's confseq 0.0.11 is a source package whose C++ build needs Boost headers;
savvi 0.3.1 installs with cvxpy but imports matplotlib without declaring it (with it added by hand, its
two-category multinomial test matched `beta_binomial_log_lr` to 1e-12); expectation needs Python 3.12.
The statistics are a few dozen lines each, tested against their closed forms instead.
"""

from gateway.rollout.sequential._state import mixture
from gateway.rollout.sequential.budget import (
    alpha_log_threshold,
    beta_binomial_log_lr,
    detector_log_threshold,
    error_rate_bounds,
    kl_bernoulli,
    requests_needed,
    requests_to_detect,
)
from gateway.rollout.sequential.errors import (
    RatioTest,
    ThresholdTest,
    ratio_look,
    shiryaev_roberts_looks,
    shiryaev_roberts_step,
    stratified_log_factor,
    threshold_increments,
    threshold_look,
)
from gateway.rollout.sequential.exact import ExactShiftTest, by_stratum, pooled_ranks, rank_increments
from gateway.rollout.sequential.latency import ShiftTest, edge_pairs, shift_look
from gateway.rollout.sequential.noninferior import NotSlowerTest, faster_ranks

__all__ = [
    "ExactShiftTest",
    "NotSlowerTest",
    "RatioTest",
    "ShiftTest",
    "ThresholdTest",
    "alpha_log_threshold",
    "beta_binomial_log_lr",
    "by_stratum",
    "detector_log_threshold",
    "edge_pairs",
    "error_rate_bounds",
    "faster_ranks",
    "kl_bernoulli",
    "mixture",
    "pooled_ranks",
    "rank_increments",
    "ratio_look",
    "requests_needed",
    "requests_to_detect",
    "shift_look",
    "shiryaev_roberts_looks",
    "shiryaev_roberts_step",
    "stratified_log_factor",
    "threshold_increments",
    "threshold_look",
]
