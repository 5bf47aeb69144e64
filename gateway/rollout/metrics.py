"""The rollout side's metric families (shared/DESIGN.md), defined here once."""

from prometheus_client import Counter, Gauge

ROLLOUT_WEIGHT = Gauge(
    "graystack_rollout_weight",
    "Percent of default-split traffic sent to each variant",
    ["rollout", "variant"],
)
SPEC_RELOADS = Counter(
    "graystack_spec_reloads",
    "Spec changes seen, applied or refused (the last good spec stays live)",
    ["result"],
)
