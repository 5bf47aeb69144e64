"""What a metrics provider hands the rollout analysis at one look: cumulative counters, as read.

Plain data, no I/O, and no import of gateway.rollout: providers build it, the analysis consumes it.

The rollout's decisions are sequential tests over per-look *increments* of cumulative counters
(docs/rollouts-and-analysis.md, "How the guard decides"), never over a sliding window. So a provider reports each
counter series as it stands now, one entry per series it read (per target or Prometheus instance, per
label set), and `gateway.rollout.evidence` takes the increments between two looks, series by series:
a series whose value fell (a process restarted) counts its new value as the increase since then, a
series first seen after an earlier look counts from 0, and the very first look only sets the start.

A counter is named by `CounterKey`:
  variant  the variant (rollout spec name) the counts are about
  signal   one of SIGNALS (below)
  stratum  where the counts must not be pooled with others: `stratum(segment, prompt_bucket)` from
           the model server's histogram labels (the header segment the request came through, so
           pinned segments stay out of comparisons, and for TTFT the prompt length, so it does not
           confound them); "" for Envoy's counters
  le       for a histogram signal, the bucket's upper bound: the cumulative count of observations
           <= le (math.inf: all of them); math.inf for plain counters
  source   the series it was read from (target or instance, metric, labels): what a reset is judged on
  pod      for a model server's histogram, the pod (target or Prometheus `instance`) it came from, so
           the analysis can compare variants at a like load per pod; "" otherwise
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

REQUESTS = "requests"  # attempts that reached the variant (Envoy: upstream_rq_total + pending_failure_eject)
ERRORS = "errors"  # of those, failed, each once (Envoy's retries and 5xx: gateway/metrics/direct.py)
TTFT = "ttft"  # the model servers' graystack_request_ttft_seconds buckets, stratum(segment, prompt_bucket)
TTFT_SUM = "ttft_sum"  # ... and its _sum (seconds), le = inf
ITL = "itl"  # graystack_request_time_per_output_token_seconds buckets (one per request), stratum(segment)
ITL_SUM = "itl_sum"  # ... and its _sum (seconds)
COMPARED = "compared"  # shadow copies whose greedy answer was compared with the baseline's (agree + differ):
# the servers' (graystack serve --compare-with), or with analysis.quality the gateway's pairs
DIFFERED = "differed"  # of those, a different answer
GENERATED = (
    "generated"  # tokens the model servers generated (graystack_tokens_total{kind="generated"}, vLLM's)
)
# With cohorts (routing.affinity), what the error tests count instead of REQUESTS and ERRORS: the
# gateway's answers with each client counted once per variant (gateway/metrics/client_units.py)
UNITS = "units"
UNIT_ERRORS = "unit_errors"
# Answer quality (analysis.quality, gateway/quality/counts.py): captured answers whose form was checked
# and those with a problem (gateway/quality/structure.py), stratum: the segment
STRUCTURED = "structured"
MALFORMED = "malformed"
CUT = "cut"  # ... and those cut at the request's token limit (the length_cut check's)
# ... and the judge's verdicts on shadow pairs (gateway/quality/judging.py): decisive ones, of those the
# candidate's losses, and ties
JUDGED = "judged"
LOST = "lost"
TIED = "tied"
SIGNALS = (
    REQUESTS,
    ERRORS,
    TTFT,
    TTFT_SUM,
    ITL,
    ITL_SUM,
    COMPARED,
    DIFFERED,
    GENERATED,
    UNITS,
    UNIT_ERRORS,
    STRUCTURED,
    MALFORMED,
    CUT,
    JUDGED,
    LOST,
    TIED,
)


UNLABELLED = "*"  # the segment of a histogram without a `segment` label (a server that is not graystack's)
# (the probes' own TTFT histogram is in the segment PROBED: gateway/spec/queries.py)


def stratum(segment: str | None, prompt_bucket: str = "") -> str:
    """The stratum of a histogram series: its `segment` label (None: the series has none) and, for
    TTFT, its `prompt_bucket`."""
    return f"{UNLABELLED if segment is None else segment}|{prompt_bucket}"


def segment_of(stratum_: str) -> str:
    return stratum_.partition("|")[0]


@dataclass(frozen=True, order=True)
class CounterKey:
    variant: str
    signal: str
    stratum: str = ""
    le: float = math.inf
    source: str = ""
    pod: str = ""


@dataclass(frozen=True, order=True)
class SampleKey:
    """Where a look's exact per-request values belong: the variant whose server answered, TTFT or ITL
    (each answer's mean time per output token), and the stratum, as for the histograms."""

    variant: str
    signal: str  # TTFT or ITL
    stratum: str


@dataclass(frozen=True)
class Observations:
    """One look. `counters`: every cumulative series read, as it stands now (see the module docstring).
        `weight_status`: variant -> its probes' statuses; `effective_windows`: variant -> the distance past
        which each of its model servers' bias is zero (0: no bias); `mismatches`: variant -> the reason of
        each of its probes that finds its server did not load the checkpoint it reads
        (`graystack_probe_server_mismatch` at 1). `samples`: exact per-request values measured since the
        last look (not cumulative: gateway/metrics/answered.py). `judge_problem`: why the judge's last call
    gave no verdict (gateway/quality/judging.py). `error`: the provider could not measure
        (query failed, target down); the rest is then empty."""

    counters: Mapping[CounterKey, float] = field(default_factory=dict)
    weight_status: Mapping[str, Sequence[str]] = field(default_factory=dict)
    effective_windows: Mapping[str, Sequence[int]] = field(default_factory=dict)
    mismatches: Mapping[str, Sequence[str]] = field(default_factory=dict)
    samples: Mapping[SampleKey, Sequence[float]] = field(default_factory=dict)
    judge_problem: str | None = None  # why the answer-quality judge's last call gave no verdict
    error: str | None = None
