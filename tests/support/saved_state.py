"""A rollout whose evidence runs every sequential test, and the looks that feed it: what
tests/unit/test_state_format.py saves, resumes and compares across state formats.

The counters are cumulative, a function of the look's number alone, so a run of looks is the same run
wherever it is replayed. Every test gets evidence: both variants fail now and then (error_rate, its
change detector, error_ratio), their servers' TTFT and inter-token histograms carry the SLO's edge
(ttft_p95, ttft_vs_baseline, itl_vs_baseline), the candidate's shadow copies are compared (shadow
agreement), captured answers are checked and some cut (structure), and the judge gives verdicts.
"""

from __future__ import annotations

import math
from typing import Any

from gateway.metrics.observations import (
    COMPARED,
    CUT,
    DIFFERED,
    ERRORS,
    ITL,
    ITL_SUM,
    JUDGED,
    LOST,
    MALFORMED,
    REQUESTS,
    STRUCTURED,
    TIED,
    TTFT,
    TTFT_SUM,
    CounterKey,
    Observations,
    SampleKey,
    stratum,
)
from gateway.names import DEFAULT_SEGMENT
from gateway.rollout.analysis import Check
from gateway.rollout.look import Carried, look
from gateway.rollout.machine import initial_state
from gateway.rollout.rollout_state import RecordDecision, RolloutState
from gateway.spec.model import RolloutSpec, validate_spec

VARIANTS = ("baseline", "zero-layer")
# the histograms' edges and the baseline's cumulative shares at them: TTFT's, with the SLO's edge (2 s),
# and inter-token latency's
EDGES = {TTFT: (0.1, 0.25, 0.5, 1.0, 2.0, 5.0), ITL: (0.01, 0.025, 0.05, 0.1, 0.25)}
SHARES = {TTFT: (0.2, 0.5, 0.8, 0.93, 0.985, 0.998), ITL: (0.2, 0.5, 0.8, 0.95, 0.99)}
START = 1_000_000.0
LOOK_S = 10.0


def spec(latency_source: str = "histograms") -> RolloutSpec:
    """Every test on, in a shadow stage (the shadow checks report there); `latency_source`: "answers"
    runs the latency tests on each answer's exact time instead of the servers' histograms."""
    return validate_spec(
        {
            "name": "zero-layer",
            "variants": {
                "baseline": {"endpoints": ["127.0.0.1:8001"]},
                "zero-layer": {"endpoints": ["127.0.0.1:8002"]},
            },
            "routing": {"weights": {"baseline": 80, "zero-layer": 20}},
            "retries": {"fallback": "baseline"},
            "strategy": {"shadow": {"duration": "1h"}, "steps": [{"weight": 20}, {"weight": 100}]},
            "analysis": {
                "interval": f"{LOOK_S:g}s",
                "latency_source": latency_source,
                "max_error_ratio": 2.0,
                "max_ttft_p95": 2.0,
                "max_latency_ratio": 1.5,
                "quality": {
                    "max_greedy_disagreement": 0.2,
                    "structure": True,
                    "judge": {"url": "http://127.0.0.1:9/v1", "model": "judge"},
                },
            },
        }
    )


def _histogram(variant: str, signal: str, seen: int, slower: float) -> dict[CounterKey, float]:
    """Cumulative buckets of `seen` observations (the candidate's shifted up by `slower`), and their sum."""
    where = stratum(DEFAULT_SEGMENT, "short" if signal == TTFT else "")
    source = f"{variant}-{signal}"
    series = {
        CounterKey(variant, signal, where, edge, source, pod=variant): round(seen * share / slower)
        for edge, share in zip(EDGES[signal], SHARES[signal], strict=True)
    }
    series[CounterKey(variant, signal, where, math.inf, source, pod=variant)] = seen
    middle = EDGES[signal][len(EDGES[signal]) // 2]
    series[CounterKey(variant, f"{signal}_sum", where, math.inf, f"{source}-sum", pod=variant)] = (
        seen * middle * slower
    )
    return series


def observations(n: int) -> Observations:
    """The counters as they stand at look `n` (cumulative since look 0)."""
    counters: dict[CounterKey, float] = {}
    for variant, share, slower in (("baseline", 4, 1.0), ("zero-layer", 1, 1.02)):
        requests = 40 * share * n
        counters |= {
            CounterKey(variant, REQUESTS, source=f"{variant}-rq"): requests,
            CounterKey(variant, ERRORS, source=f"{variant}-err"): n // (7 if variant == "baseline" else 5),
            CounterKey(variant, STRUCTURED, DEFAULT_SEGMENT, source="q"): 3 * n,
            CounterKey(variant, MALFORMED, DEFAULT_SEGMENT, source="q"): n // 6,
            CounterKey(variant, CUT, DEFAULT_SEGMENT, source="q"): n // (4 if variant == "baseline" else 3),
        }
        counters |= _histogram(variant, TTFT, requests, slower) | _histogram(variant, ITL, requests, slower)
    counters |= {
        CounterKey("zero-layer", COMPARED, source="cmp"): 5 * n,
        CounterKey("zero-layer", DIFFERED, source="cmp"): n // 3,
        CounterKey("zero-layer", JUDGED, source="judge"): 2 * n,
        CounterKey("zero-layer", LOST, source="judge"): n // 2,
        CounterKey("zero-layer", TIED, source="judge"): n // 4,
    }
    assert {k.signal for k in counters} >= {TTFT_SUM, ITL_SUM}
    return Observations(counters=counters, samples=_samples(n))


def _samples(n: int) -> dict[SampleKey, list[float]]:
    """The look's exact values, as the gateway measures its answers (the candidate's a little slower)."""
    found = {}
    for variant, share, slower in (("baseline", 4, 1.0), ("zero-layer", 1, 1.1)):
        for signal, where, base in (
            (TTFT, stratum(DEFAULT_SEGMENT, "short"), 0.3),
            (ITL, stratum(DEFAULT_SEGMENT), 0.03),
        ):
            values = [base * slower * (1 + ((n * 7 + i) % 13) / 10) for i in range(6 * share)]
            found[SampleKey(variant, signal, where)] = values
    return found


def run(spec_: RolloutSpec, state: RolloutState, carried: Carried, first: int, looks: int) -> tuple:
    """`looks` looks from look `first` on: (state, carried, the last look's checks)."""
    checks: tuple[Check, ...] = ()
    for n in range(first, first + looks):
        done = look(spec_, state, carried, START + n * LOOK_S, seen=observations(n))
        state, carried = done.state, done.carried
        checks = next((a.checks for a in done.actions if isinstance(a, RecordDecision)), checks)
    return state, carried, checks


def checks_as_data(checks: tuple[Check, ...]) -> list[dict[str, Any]]:
    """The checks as a JSON file keeps them (the verdict as its value)."""
    return [
        {
            "name": c.name,
            "verdict": c.verdict.value,
            "value": c.value,
            "samples": c.samples,
            "log_evalue": c.log_evalue,
            "log_bound": c.log_bound,
        }
        for c in checks
    ]


def starting_state(spec_: RolloutSpec) -> RolloutState:
    return initial_state(spec_, START)


SAVED_LOOKS, RESUMED_LOOKS = 30, 10


def resumed(spec_: RolloutSpec, saved: RolloutState) -> tuple[Check, ...]:
    """The checks after a gateway restarted on `saved` and looked RESUMED_LOOKS times (its first look
    only sets the counters' start, as a restarted controller's does)."""
    return run(spec_, saved, Carried(proxy_seen=True), SAVED_LOOKS, RESUMED_LOOKS)[2]


def main() -> None:
    """Write, for each latency source, the state saved after SAVED_LOOKS looks and the checks a resumed
    gateway reports: `python -m tests.support.saved_state DIR` (the format-1 files under
    tests/unit/saved_states/ were made so at commit d701f41, before the state format 2)."""
    import json
    import sys
    from pathlib import Path

    from gateway.rollout.state_store import decode_state, encode_state

    directory = Path(sys.argv[1])
    for source in ("histograms", "answers"):
        spec_ = spec(source)
        saved = run(spec_, starting_state(spec_), Carried(proxy_seen=True), 0, SAVED_LOOKS)[0]
        text = encode_state(saved)
        (directory / f"{source}.state.json").write_text(text)
        checks = checks_as_data(resumed(spec_, decode_state(text)))
        (directory / f"{source}.checks.json").write_text(json.dumps(checks, indent=2) + "\n")


if __name__ == "__main__":
    main()
