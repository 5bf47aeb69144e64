"""The Endpoint Picker's metric families (their names: gateway/families.py), counted at its I/O edge
(gateway/epp/service.py): what it decided for the requests it routed, and where it had to do without,
so that a dashboard shows a model variant measured on fewer requests than its weight asks, scorers
blind to bodies they could not read, and pods ranked without their metrics."""

from prometheus_client import Counter

from gateway import families

PICKS = Counter(
    families.EPP_PICKS,
    "Requests the Endpoint Picker routed, by the variant each is served and measured as (a model "
    "variant's request sent unchanged counts as the baseline's)",
    ["variant"],
)
UNCHANGED = Counter(
    families.EPP_UNCHANGED,
    "A model variant's requests sent as they came, its model name not written in, so served as the "
    "baseline's, by the model variant and why (no body, not JSON, not a JSON object, no model, too large)",
    ["variant", "reason"],
)
UNREAD = Counter(
    families.EPP_UNREAD,
    "Requests picked without the body a scorer (prefix, lora) reads, by why (not JSON, not a JSON "
    "object, too large)",
    ["reason"],
)
FALLBACK_SCORES = Counter(
    families.EPP_FALLBACK_SCORES,
    "Pods ranked on the picker's own in-flight count in place of metrics it has no fresh reading of "
    "(never read, unreadable, stale), once per pick that ranked them",
)


def picked(variant: str, unmetered: int) -> None:
    """One routed request, counted as `variant`'s, with the pods ranked without fresh metrics for it."""
    PICKS.labels(variant).inc()
    FALLBACK_SCORES.inc(unmetered)
