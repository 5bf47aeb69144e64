"""The split served, read from the model servers' own request counters, where no access log of the user's
gateway reaches graystack (a gateway that is not Envoy-based; issue 36). Pure: each endpoint's metrics
text, in; the requests each variant's endpoints took since the last read, out.

What it costs, against the access log: a counter counts every request its server took, whichever route
or client sent it (another route to the same pods, a health check that is a request, a mirrored copy),
and at the looks' resolution, not per answer; so the proof holds only where the rollout's route is the
pods' only caller, and nothing per answer (first token, errors after the status) comes with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families


def requests_counted(text: str, counter: str) -> float:
    """The sum of `counter` over its labels in Prometheus text (a counter's samples end in `_total`, the
    family name may not); ValueError naming the counter where the text has none of it."""
    wanted = {counter, f"{counter}_total", counter.removesuffix("_total")}
    found = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in wanted and not sample.name.endswith(("_created", "_bucket"))
    ]
    if not found:
        raise ValueError(f"no {counter!r} in the server's metrics")
    return sum(found)


def taken_since(
    before: Mapping[str, float], now: Mapping[str, float], variants: Mapping[str, str]
) -> tuple[Counter[str], dict[str, float]]:
    """(requests per variant since `before`, the readings to keep): `before` and `now` are each endpoint's
    counter (by URL), `variants` each endpoint's variant. An endpoint first read counts from its reading
    (none yet); a counter that went down (the server restarted) counts from zero."""
    taken: Counter[str] = Counter()
    for url, value in now.items():
        if url in before:
            taken[variants[url]] += round(value - before[url] if value >= before[url] else value)
    return taken, dict(now)
