"""The Prometheus alert rules, one source for the rules file and the chart's PrometheusRule.

Thresholds are the rollout analysis' defaults (gateway/spec/strategy.py `Analysis`), so a page means what
the rollback guard would call a failure. tests/promtool/alerts_test.yml shows each alert firing and
staying quiet; docs/dashboards-and-alerts.md says what to do about each.

The gateway creates `graystack_xds_nacks_total{type}` at 0 for every type (gateway/xds/telemetry.py
`zero_counters`), so `increase()` sees the first NACK of a type: a series born at 1 would be invisible.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import yaml

from gateway.families import (
    ROLLOUT_PHASE,
    VARIANT_REPLICAS,
    XDS_CONNECTED_PROXIES,
    XDS_NACKS,
    XDS_PROXY_CONNECTED,
)
from gateway.spec.strategy import Analysis
from inference.families import (
    PROBE_REQUESTS,
    PROBE_SERVER_MISMATCH,
    PROBE_WEIGHT_STATUS,
    REQUEST_TTFT,
    REQUESTS,
    SHADOW_COMPARISONS,
)

T = TypeVar("T")


def _quoted(value: T | None, field: str) -> T:
    """A default the alerts quote: the spec sets it, though a rollout's own spec may turn it off."""
    if value is None:
        raise ValueError(f"the spec's default {field} is null: the alerts have no threshold to quote")
    return value


DEFAULTS = Analysis()
TTFT_SLO = _quoted(DEFAULTS.max_ttft_p95, "max_ttft_p95")
EXPECTED_WEIGHT_STATUS = _quoted(DEFAULTS.expected_weight_status, "expected_weight_status")
TTFT_OBJECTIVE = 0.95  # `max_ttft_p95`: 95 % of requests get their first token within the SLO edge
PROBE_MAX_FAILURE_RATIO = 0.2  # synthetic requests failing over 5 minutes
# Shadow copies whose baseline answer the candidate could not find, over 10 minutes: more than half is a
# comparison that does not work (a healthy one misses only the originals the baseline failed).
SHADOW_MAX_MISSING_RATIO = 0.5
# A variant's ready pods below what the capacity plan wants for this long: more than the chart's default
# rollout.capacity.readyTimeout (10m, after which the step freezes), so it pages what the rollout already
# stopped on, not pods that are just starting.
CAPACITY_NOT_READY_MINUTES = 15
# Multiwindow burn rates (Google SRE workbook, "Alerting on SLOs", for a 30-day budget): the long window
# says the budget is going, the short one that it still is.
BURN_WINDOWS = {"Fast": (14.4, "1h", "5m", "2m", "critical"), "Slow": (6.0, "6h", "30m", "15m", "warning")}


def dashboard(uid: str) -> str:
    return f"/d/{uid}"


def ttft_bad_ratio(window: str) -> str:
    """Share of requests whose first token came later than the SLO edge, per namespace and variant."""
    edge = TTFT_SLO
    le = f"{edge:g}|{re.escape(repr(float(edge)))}".replace("\\", "\\\\")  # `2|2\\.0` in PromQL
    by = "sum by (namespace, variant)"
    within = f'{by} (rate({REQUEST_TTFT}_bucket{{le=~"{le}"}}[{window}]))'
    return f"(1 - {within} / {by} (rate({REQUEST_TTFT}_count[{window}])))"


def rule(
    name: str, expr: str, severity: str, summary: str, description: str, uid: str, for_: str | None = None
) -> dict[str, Any]:
    built: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        built["for"] = for_
    built["labels"] = {"severity": severity}
    built["annotations"] = {"summary": summary, "description": description, "dashboard": dashboard(uid)}
    return built


def rollout_rules() -> list[dict[str, Any]]:
    allowed = "|".join(EXPECTED_WEIGHT_STATUS)
    return [
        rule(
            "GraystackVariantErrorRateHigh",
            f'sum by (namespace, variant) (rate({REQUESTS}{{code=~"5.."}}[5m])) '
            f"/ sum by (namespace, variant) (rate({REQUESTS}[5m])) "
            f"> {DEFAULTS.max_error_rate}",
            "warning",
            "{{ $labels.variant }} answers {{ $value | humanizePercentage }} of requests with a 5xx",
            f"Over {DEFAULTS.max_error_rate:.1%} (the rollback guard's default) for 5 minutes.",
            "graystack-variants",
            "5m",
        ),
        rule(
            "GraystackRolloutRolledBack",
            f'max by (namespace, rollout) ({ROLLOUT_PHASE}{{phase="rolled_back"}}) == 1',
            "warning",
            "Rollout {{ $labels.rollout }} was rolled back",
            "Every segment is on the baseline. The Rollout decisions dashboard shows the failing check; "
            "`graystack retry` starts over once it is fixed.",
            "graystack-rollout-decisions",
        ),
        rule(
            "GraystackZeroLayerWeightStatusUnexpected",
            f"max by (namespace, instance, variant, status) ({PROBE_WEIGHT_STATUS}"
            f'{{variant="zero-layer", status!~"{allowed}"}}) == 1',
            "critical",
            "A zero-layer pod ({{ $labels.instance }}) reports weight status {{ $labels.status }}",
            f"Zero-layer pods must serve a checkpoint whose bias layer is {' or '.join(EXPECTED_WEIGHT_STATUS)}.",
            "graystack-probes",
            "1m",
        ),
        rule(
            "GraystackServerNotServingCheckpoint",
            f"max by (namespace, instance, variant, reason) ({PROBE_SERVER_MISMATCH}) == 1",
            "critical",
            "The {{ $labels.variant }} server beside {{ $labels.instance }} did not load the checkpoint "
            "its probe reads",
            "{{ $labels.reason }}. The pod serves weights whose bias layer nobody checked (a loader "
            "dropped tensors, or the file changed under the running server); the rollback guard fails "
            "weight_status on it.",
            "graystack-probes",
            "2m",
        ),
        rule(
            "GraystackProbeFailing",
            f'sum by (namespace, instance, variant) (rate({PROBE_REQUESTS}{{result!="ok"}}[5m])) '
            f"/ sum by (namespace, instance, variant) (rate({PROBE_REQUESTS}[5m])) "
            f"> {PROBE_MAX_FAILURE_RATIO}",
            "warning",
            "The probe at {{ $labels.instance }} fails {{ $value | humanizePercentage }} of its requests",
            "The synthetic requests straight to the pod fail: the pod is down, overloaded or broken.",
            "graystack-probes",
            "5m",
        ),
        shadow_comparisons_missing(),
        capacity_not_ready(),
        *(ttft_burn(speed, *windows) for speed, windows in BURN_WINDOWS.items()),
    ]


def shadow_comparisons_missing() -> dict[str, Any]:
    """No agreement alert: answers are compared whole, so the agreement a good candidate reaches depends
    on the answers' length, and a spec's `min_shadow_agreement` is judged by the guard (a failure rolls
    back and pages). This one covers what the guard cannot see: comparisons that find no baseline
    answer, which the check leaves out (and it does not run when none is found)."""
    by = "sum by (namespace, variant)"
    tried = f"{by} (increase({SHADOW_COMPARISONS}[10m]))"
    missing = f'{by} (increase({SHADOW_COMPARISONS}{{result="missing"}}[10m]))'
    least = DEFAULTS.min_requests
    return rule(
        "GraystackShadowComparisonsMissing",
        f"{missing} / {tried} > {SHADOW_MAX_MISSING_RATIO} and {tried} >= {least}",
        "warning",
        "{{ $labels.variant }} found no baseline answer for {{ $value | humanizePercentage }} of its "
        "shadow comparisons",
        f"Over {SHADOW_MAX_MISSING_RATIO:.0%} of at least {least} shadow copies in 10 minutes: its "
        "--compare-with does not list every baseline pod, or they are unreachable. The shadow_agreement "
        "check judges only the answers found, and does not run when none are.",
        "graystack-rollout-decisions",
        "2m",
    )


def replicas(state: str) -> str:
    """A template reading the alerting variant's `state` replicas, for its annotations (the expression's
    value is only the ready ones). `namespace=""` also matches the local series, which have none."""
    series = VARIANT_REPLICAS + '{namespace="%s", rollout="%s", variant="%s", state="' + state + '"}'
    return (
        f"{{{{ printf `max({series})` $labels.namespace $labels.rollout $labels.variant "
        "| query | first | value }}"
    )


def capacity_not_ready() -> dict[str, Any]:
    """A step that cannot get its pods (GPU quota, no GPU node, pods that crash): the leading gateway
    exports what the capacity plan wants and what runs (Kubernetes, rollout.capacity enabled)."""
    by = "max by (namespace, rollout, variant)"
    return rule(
        "GraystackCapacityNotReady",
        f'{by} ({VARIANT_REPLICAS}{{state="ready"}}) < {by} ({VARIANT_REPLICAS}{{state="wanted"}})',
        "warning",
        f"{{{{ $labels.variant }}}}: {{{{ $value }}}} of the {replicas('wanted')} pods its capacity plan "
        "wants are ready",
        f"For {CAPACITY_NOT_READY_MINUTES} minutes in rollout {{{{ $labels.rollout }}}}: {replicas('running')} pods "
        "running (holding GPUs). Fewer running than wanted: pods that cannot be scheduled (GPU quota, "
        "no GPU node; the Deployment's events say which). Running but not ready: pods starting slowly or "
        "crashing. The step waiting for them freezes after rollout.capacity.readyTimeout.",
        "graystack-variants",
        f"{CAPACITY_NOT_READY_MINUTES}m",
    )


def ttft_burn(speed: str, burn: float, long: str, short: str, for_: str, severity: str) -> dict[str, Any]:
    budget = 1 - TTFT_OBJECTIVE
    limit = round(burn * budget, 6)
    return rule(
        f"GraystackTTFTBudgetBurn{speed}",
        f"{ttft_bad_ratio(long)} > {limit} and {ttft_bad_ratio(short)} > {limit}",
        severity,
        f"{{{{ $labels.variant }}}} burns its TTFT error budget {burn:g}x too fast",
        f"More than {limit:.0%} of requests over {long} and {short} waited longer than "
        f"{TTFT_SLO:g}s for their first token (objective: {TTFT_OBJECTIVE:.0%} within it).",
        "graystack-variants",
        for_,
    )


def control_plane_rules() -> list[dict[str, Any]]:
    return [
        rule(
            "GraystackXdsNack",
            f"sum by (namespace, type) (increase({XDS_NACKS}[10m])) > 0",
            "warning",
            "An Envoy rejected the gateway's {{ $labels.type }} config",
            "The proxy keeps its last good config, so the rollout's weights may not be live there; "
            "`graystack status` names the proxy and the error.",
            "graystack-control-plane",
        ),
        rule(
            "GraystackProxyDisconnected",
            f"max by (namespace, node) ({XDS_PROXY_CONNECTED}) == 0",
            "warning",
            "Envoy {{ $labels.node }} lost its connection to the control plane",
            "No gateway replica has its ADS stream (keepalive failed, or it went away): it routes by the "
            "last split it ACKed, so a rollback is not live there; `graystack status` says since when. "
            "A proxy scaled away is forgotten after the gateway's --forget-proxies-after.",
            "graystack-control-plane",
            "1m",
        ),
        rule(
            "GraystackNoConnectedProxies",
            f"sum by (namespace) ({XDS_CONNECTED_PROXIES}) < 1",
            "critical",
            "No Envoy is connected to the gateway",
            "No proxy receives weight changes or rollbacks.",
            "graystack-control-plane",
            "2m",
        ),
    ]


def rules() -> dict[str, Any]:
    return {
        "groups": [
            {"name": "graystack-rollout", "rules": rollout_rules()},
            {"name": "graystack-control-plane", "rules": control_plane_rules()},
        ]
    }


HEADER = "# Generated by `make dashboards` from graystack/observability/alerts.py: edit that, not this.\n"


def render() -> str:
    return HEADER + yaml.safe_dump(rules(), sort_keys=False, width=1000, allow_unicode=True)
