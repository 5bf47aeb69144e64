"""Latency histogram edges, 1.2 apart and anchored at the 2 s SLO edge: the model server's TTFT and
time-per-output-token families use them, and so do the gateway's measurements of every answer
(gateway/answers/telemetry.py). No dependencies, so the slim gateway image imports it."""

from __future__ import annotations

import math

LATENCY_RATIO = 1.2  # neighbouring latency edges: the rollout's default tolerated slowdown (20 %)
TTFT_SLO_SECONDS = 2.0  # the spec's analysis.max_ttft_p95: an exact edge, so `le="2"` is the SLO itself


def geometric_buckets(low: float, high: float, anchor: float = TTFT_SLO_SECONDS) -> tuple[float, ...]:
    """Edges anchor * 1.2**k covering [low, high], rounded to 6 significant digits.

    The rollout compares latency distributions with a margin (gateway/rollout/sequential/): "the
    candidate is at most 20 % slower" is tested as P_candidate(T > 1.2 e) <= P_baseline(T > e) at
    edges e, which needs edge pairs 1.2 apart. vLLM's families (1, 2.5, 5, ...) have pairs 2.5x apart,
    so against them the same test can only tell a 2.5x slowdown. Anchored at the SLO's 2 s.
    """
    lowest = math.floor(math.log(low / anchor, LATENCY_RATIO))
    highest = math.ceil(math.log(high / anchor, LATENCY_RATIO))
    return tuple(float(f"{anchor * LATENCY_RATIO**k:.6g}") for k in range(lowest, highest + 1))


TTFT_BUCKETS = geometric_buckets(0.01, 60.0)
INTER_TOKEN_BUCKETS = geometric_buckets(0.002, 20.0)
