"""The Probes dashboard: the sidecars' view of each pod."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import statetimeline
from grafana_foundation_sdk.models import common

from graystack.observability.dashboards.panels import base, graph, query, with_queries
from graystack.observability.promql import VARIANT, quantile, rate
from inference.families import (
    PROBE_E2E,
    PROBE_FINGERPRINT_MATCH,
    PROBE_REQUESTS,
    PROBE_SERVER_MISMATCH,
    PROBE_TTFT,
    PROBE_WEIGHT_CHECK_SECONDS,
    PROBE_WEIGHT_STATUS,
)


def probes() -> gd.Dashboard:
    board = base(
        "graystack-probes",
        "graystack / Probes",
        "The sidecars' view of each pod: the checkpoint's weight status, synthetic requests and "
        "their latency.",
    )
    status = (
        statetimeline.Panel()
        .show_value(common.VisibilityMode.NEVER)
        .title("Weight status per pod")
        .description(
            "The status each probe reads from its pod's checkpoint: ERASED or ZEROED is expected on "
            "zero-layer, ACTIVE on the baseline; MISSING or CORRUPT is a broken pod."
        )
    )
    current = query(f"{PROBE_WEIGHT_STATUS}{{{VARIANT}}} == 1", "{{variant}} {{instance}} {{status}}")
    board.with_panel(with_queries(status, current).span(24).height(8))
    board.with_panel(
        graph(
            "Synthetic requests by result",
            "reqps",
            "ok, or why a probe request failed (unreachable, http_error, ...).",
            query(
                rate(PROBE_REQUESTS, VARIANT, "variant, instance, result"),
                "{{variant}} {{instance}} {{result}}",
            ),
        )
    )
    board.with_panel(
        graph(
            "Fingerprint matches the variant",
            "short",
            "1 when the pod's fingerprint header (x-model-fingerprint unless the probe names another) "
            "carries the variant's expected suffix; no series where the probe's check is off "
            "(servers that send no fingerprint).",
            query(f"{PROBE_FINGERPRINT_MATCH}{{{VARIANT}}}", "{{variant}} {{instance}}"),
        )
    )
    board.with_panel(
        graph(
            "Server did not load the checkpoint",
            "short",
            "1 while a pod's server did not load the checkpoint its probe reads (the series' reason says "
            "how the file's status and fingerprint differ from the server's graystack_model_info or its "
            "echoed system_fingerprint), 0 while they agree; no series where the probe cannot compare "
            "them or its --loaded-check is off.",
            query(f"{PROBE_SERVER_MISMATCH}{{{VARIANT}}}", "{{variant}} {{instance}} {{reason}}"),
        )
    )
    board.with_panel(
        graph(
            "Probe latency p95",
            "s",
            "Synthetic requests' time to first token and end to end, straight to the pod.",
            query(quantile(0.95, PROBE_TTFT, VARIANT, "variant"), "{{variant}} TTFT"),
            query(quantile(0.95, PROBE_E2E, VARIANT, "variant"), "{{variant}} e2e"),
        )
    )
    board.with_panel(
        graph(
            "Weight check time p95",
            "s",
            "Time to read the checkpoint header and the bias tensors.",
            query(quantile(0.95, PROBE_WEIGHT_CHECK_SECONDS, VARIANT, "variant"), "{{variant}}"),
        )
    )
    return board
