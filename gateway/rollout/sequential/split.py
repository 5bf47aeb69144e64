"""Is the split the data plane serves the split that was asked for? An anytime-valid answer from the
answers themselves, each attributed to a variant by the endpoint that served it (issue 36).

After a change of the weights, every answer that started after it is one draw: from the candidate's
endpoints with the share q the data plane realises. The asked weight p is *shown* once the confidence
sequence for q lies inside p's tolerance band, and *refuted* once it lies wholly outside it; until
either, the change is pending. The band is p ± t, t = min(10 points, half the distance from p to 0 or
1), at least half a point: never looser than GIE's conformance test (±10 points over 200 requests),
and tight where a small canary needs it (5 % asked: 2.5-7.5 %; 1 %: 0.5-1.5 %), so "5 % asked, 0 of
612 answers from the candidate's pods" is refuted instead of passing as within 10 points.

The confidence sequence is error_rate_bounds' (a Beta mixture centred on p, valid at every look at
once), so a data plane that serves q inside the band is refuted with chance at most alpha over all
looks, and one that serves q outside it is shown with chance at most alpha: a proof can be trusted
whichever way it comes out, however often it is read. The two tests below are that set's ends, in
closed form: the mixture's evidence against each edge of the band (it is least at the share seen, so
the set lies inside the band exactly when both edges are rejected, outside when the nearer one is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
from scipy.special import betaln, xlogy

from gateway.rollout.sequential._state import State, count, require

MAX_TOLERANCE = 0.10  # GIE's conformance allows ±10 points; never looser than that
MIN_TOLERANCE = 0.005  # a band of 0 (0 % or 100 % asked) could never be shown


class Proof(StrEnum):
    SHOWN = "shown"
    REFUTED = "refuted"
    PENDING = "pending"


def band(asked: float) -> tuple[float, float]:
    """The shares that count as `asked` (clipped to [0, 1])."""
    tolerance = max(MIN_TOLERANCE, min(MAX_TOLERANCE, min(asked, 1 - asked) / 2))
    return max(0.0, asked - tolerance), min(1.0, asked + tolerance)


def log_evidence(candidate: np.ndarray, answers: np.ndarray, share: float, asked: float) -> np.ndarray:
    """The Beta mixture's log evidence against "the data plane serves `share`" (a Beta(1, 1/p - 1) prior
    centred on the asked p, p kept inside (0.001, 0.999)), vectorised over runs."""
    prior = min(max(asked, 0.001), 0.999)
    a, b = 1.0, 1.0 / prior - 1.0
    mixture = betaln(a + candidate, b + answers - candidate) - betaln(a, b)
    return np.asarray(mixture - xlogy(candidate, share) - xlogy(answers - candidate, 1.0 - share))


def proofs(candidate: np.ndarray, answers: np.ndarray, asked: float, alpha: float) -> np.ndarray:
    """Per run, 1 where the asked split is shown, -1 where refuted, 0 where pending."""
    low, high = band(asked)
    bound = np.log(1.0 / alpha)
    seen = np.divide(
        candidate, answers, out=np.full(np.shape(candidate), asked, dtype=float), where=answers > 0
    )
    # an edge at 0 or 1 bounds nothing: no share lies beyond it
    against_low = (
        log_evidence(candidate, answers, low, asked) >= bound if low > 0 else np.ones_like(seen, bool)
    )
    against_high = (
        log_evidence(candidate, answers, high, asked) >= bound if high < 1 else np.ones_like(seen, bool)
    )
    inside = (seen >= low) & (seen <= high)
    shown = inside & against_low & against_high
    refuted = ((seen < low) & against_low) | ((seen > high) & against_high)
    return np.where(shown, 1, np.where(refuted, -1, 0))


@dataclass(frozen=True)
class SplitTest(State):
    """The answers since the weights became `asked`: how many, and how many the candidate's endpoints
    served."""

    asked: float
    candidate: int = 0
    answers: int = 0

    def __post_init__(self) -> None:
        self._check()

    def add(self, candidate: int, answers: int) -> SplitTest:
        candidate, answers = count("candidate", candidate), count("answers", answers)
        require(candidate <= answers, "candidate", f"{candidate} of {answers} answers")
        return replace(self, candidate=self.candidate + candidate, answers=self.answers + answers)

    def proof(self, alpha: float) -> Proof:
        found = int(proofs(np.array([self.candidate]), np.array([self.answers]), self.asked, alpha)[0])
        return {1: Proof.SHOWN, -1: Proof.REFUTED}.get(found, Proof.PENDING)

    def describe(self) -> str:
        """The counts as status and the notifications say them."""
        low, high = band(self.asked)
        return (
            f"{self.asked:.0%} asked, {self.candidate} of {self.answers} answers from the candidate's "
            f"endpoints (shown within {low:.1%}-{high:.1%})"
        )

    def _check(self) -> None:
        require(0.0 <= self.asked <= 1.0, "SplitTest.asked", f"must be in [0, 1], got {self.asked}")
        require(self.candidate <= self.answers, "SplitTest.candidate", "more than the answers")
