"""The four Grafana dashboards, built with grafana-foundation-sdk (docs/dashboards-and-alerts.md says what each shows).

Every panel reads one Prometheus data source chosen by the `datasource` variable; `namespace`, `rollout`
and `variant` filter the series (see promql.py for why `.*` is their "All").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from graystack.observability.promql import (
    NAMESPACE,
    RATE,
    ROLLOUT,
    ROUTE_CLUSTER,
    SERVER_VARIANT,
    SHADOW_CLUSTER,
    VARIANT,
    quantile,
    rate,
)

P = TypeVar("P", timeseries.Panel, stat.Panel, statetimeline.Panel, table.Panel)
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
QUANTILES = (0.5, 0.95, 0.99)
# The rollout analysis' checks that carry a value (gateway/rollout/plan.py CHECK_NAMES), and its unit.
# The others are drawn on the evidence panel only: error_rate_change and itl_vs_baseline have no value,
# and error_ratio's (the candidate's error rate over the baseline's) has none while the baseline has
# no error, which is most of the time.
CHECKS = {
    "error_rate": "percentunit",
    "ttft_p95": "percentunit",
    "ttft_vs_baseline": "none",
    "weight_status": "none",
    "shadow_agreement": "percentunit",
}
# What a check's panel needs said beyond its value and threshold.
CHECK_NOTES = {
    "error_rate": " The value is the candidate's error rate over the rollout; the threshold is max_error_rate.",
    "ttft_p95": " The share of first tokens above the SLO (max_ttft_p95), against 5 %.",
    "ttft_vs_baseline": " The candidate's mean TTFT over the baseline's this stage (the shadow gate's "
    "ratio); the test itself compares the distributions against max_latency_ratio.",
    "shadow_agreement": " Only with analysis.min_shadow_agreement set, in a shadow stage: its threshold "
    "is a floor (below it fails).",
}


def query(expr: str, legend: str = "") -> prometheus.Dataquery:
    built = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    return built.legend_format(legend) if legend else built


def with_queries(panel: P, *queries: prometheus.Dataquery) -> P:
    """The panel reading `queries` from the chosen data source, each with its own refId (A, B, ...)."""
    refs = [q.ref_id(chr(ord("A") + index)) for index, q in enumerate(queries)]
    return panel.datasource(DATASOURCE).targets(refs)


def graph(title: str, unit: str, description: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    """A time series with a table legend (mean, max, last): variants compare at a glance."""
    legend = (
        gc.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max", "lastNotNull"])
    )
    tooltip = gc.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)
    panel = (
        timeseries.Panel().title(title).description(description).unit(unit).legend(legend).tooltip(tooltip)
    )
    return with_queries(panel, *queries).span(12).height(8)


def quantiles(title: str, histogram: str, description: str) -> timeseries.Panel:
    """p50/p95/p99 of a model-server histogram, one line per variant and quantile."""
    lines = [
        query(quantile(q, histogram, VARIANT, "variant"), f"{{{{variant}}}} p{round(q * 100)}")
        for q in QUANTILES
    ]
    return graph(title, "s", description, *lines)


def variables(source: str) -> list[gd.QueryVariable | gd.DatasourceVariable]:
    """datasource, then namespace -> rollout -> variant, each listing the values of `source`'s series
    that the previous ones select. "All" on namespace is `.*`, which also matches series without the
    label (the local stack's); on rollout and variant it is Grafana's union of the listed values, so a
    variant's regex matches its Envoy cluster and not `<variant>-with-fallback`."""

    def chained(name: str, selector: str, all_value: str | None = None) -> gd.QueryVariable:
        series = f"{source}{{{selector}}}" if selector else source
        variable = (
            gd.QueryVariable(name)
            .label(name.capitalize())
            .datasource(DATASOURCE)
            .query(f"label_values({series}, {name})")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
        )
        return variable.all_value(all_value) if all_value else variable

    return [
        gd.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        chained("namespace", "", all_value=".*"),
        chained("rollout", NAMESPACE),
        chained("variant", ROLLOUT),
    ]


def base(uid: str, title: str, description: str) -> gd.Dashboard:
    return (
        gd.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["graystack"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone(common.TimeZoneBrowser)
        .variables(variables("graystack_rollout_weight"))
    )


def phase_change(phase: str, name: str, color: str) -> gd.AnnotationQuery:
    """A mark where a rollout entered `phase`: 1 now and not 1 one step earlier."""
    entered = f'max by (namespace, rollout) (graystack_rollout_phase{{{ROLLOUT}, phase="{phase}"}}) == 1'
    before = (
        f'max by (namespace, rollout) (graystack_rollout_phase{{{ROLLOUT}, phase="{phase}"}} '
        "offset $__interval) == 1"
    )
    return (
        gd.AnnotationQuery()
        .name(name)
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color(color)
        .expr(f"{entered} unless {before}")
    )


def rollout_decisions() -> gd.Dashboard:
    board = base(
        "graystack-rollout-decisions",
        "graystack / Rollout decisions",
        "Why a rollout moved: its weights per segment and phase, each analysis check against its "
        "threshold, the verdicts and their samples, and how fast every Envoy ACKed the change.",
    )
    board.annotation(phase_change("rolled_back", "Rollbacks", "red"))
    board.annotation(phase_change("promoted", "Promotions", "green"))
    board.with_row(gd.Row("Where the traffic goes"))
    board.with_panel(
        graph(
            "Weight per segment and variant",
            "percent",
            "Percent of each segment's traffic sent to each variant: `default` is the default split, "
            "the others are header segments (a rollback sends every segment to the baseline).",
            query(
                f'graystack_rollout_segment_weight{{{ROLLOUT}, variant=~"$variant"}}',
                "{{rollout}} {{segment}} {{variant}}",
            ),
        )
    )
    phase = (
        statetimeline.Panel()
        .show_value(common.VisibilityMode.NEVER)
        .title("Phase")
        .description("The rollout's phase over time: shadow, progressing, promoted, rolled_back, manual.")
    )
    board.with_panel(
        with_queries(phase, query(f"graystack_rollout_phase{{{ROLLOUT}}} == 1", "{{rollout}} {{phase}}"))
        .span(12)
        .height(8)
    )
    board.with_row(gd.Row("Evidence against its bound"))
    board.with_panel(
        graph(
            "Evidence against bound, per sequential test",
            "none",
            "Each test's log e-value (error_rate_change: the change detector's log statistic) and the "
            "bound it fails at: log(1/alpha), alpha its share of analysis.false_rollback_budget "
            "(error_rate_change: the log of its looks between false alarms). A rollback is a line "
            "crossing its bound; the evidence accumulates over the whole rollout and restarts only on "
            "retry or a new candidate.",
            query(f"graystack_analysis_log_evalue{{{ROLLOUT}}}", "{{rollout}} {{check}}"),
            query(f"graystack_analysis_log_evalue_bound{{{ROLLOUT}}}", "{{rollout}} {{check}} bound"),
        ).span(16)
    )
    board.with_panel(
        graph(
            "Candidate error rate: anytime confidence bounds",
            "percentunit",
            "The candidate's error rate over the rollout, with confidence bounds valid at every look at "
            "once (a confidence sequence), against max_error_rate.",
            query(f"graystack_analysis_error_rate_bound{{{ROLLOUT}}}", "{{rollout}} {{side}}"),
            query(f'graystack_analysis_check_value{{{ROLLOUT}, check="error_rate"}}', "{{rollout}} rate"),
            query(
                f'graystack_analysis_check_threshold{{{ROLLOUT}, check="error_rate"}}',
                "{{rollout}} threshold",
            ),
        ).span(8)
    )
    board.with_row(gd.Row("Each check against its threshold"))
    for check, unit in CHECKS.items():
        selector = f'{ROLLOUT}, check="{check}"'
        board.with_panel(
            graph(
                f"Check {check}: value and threshold",
                unit,
                "The value the last analysis saw (a gap: no value, e.g. too few requests) and the "
                "threshold it is held to." + CHECK_NOTES.get(check, ""),
                query(f"graystack_analysis_check_value{{{selector}}}", "{{rollout}} value"),
                query(f"graystack_analysis_check_threshold{{{selector}}}", "{{rollout}} threshold"),
            ).span(6)
        )
    board.with_panel(shadow_agreement().span(24 - len(CHECKS) * 6 % 24))  # beside the last check's panel
    board.with_panel(
        graph(
            "Verdicts per check",
            "short",
            "Analysis results per look: pass, fail, inconclusive (a stage still extending for evidence, "
            "or no data), error (metrics unreadable).",
            query(
                f"sum by (check, result) (increase(graystack_analysis_checks_total{{{ROLLOUT}}}[{RATE}]))",
                "{{check}} {{result}}",
            ),
        )
    )
    board.with_panel(
        graph(
            "Samples per check",
            "short",
            "What each check has judged: the candidate's requests over the rollout (shadow copies "
            "included) for the error checks, its first tokens or token gaps for the latency checks, "
            "probes for weight_status, compared shadow answers for shadow_agreement.",
            query(f"graystack_analysis_check_samples{{{ROLLOUT}}}", "{{rollout}} {{check}}"),
        )
    )
    board.with_row(gd.Row("Rollbacks and Envoy's ACKs"))
    rollbacks = (
        table.Panel()
        .show_header(True)
        .title("Rollbacks by reason")
        .description(
            "Rollbacks since the gateway started, by reason (every reason listed, 0 until it happens): "
            "the first failing check, shared_incident (the baseline failed the same test), operator, "
            "metrics_error."
        )
    )
    reasons = query(f"sum by (rollout, reason) (graystack_rollout_rollbacks_total{{{ROLLOUT}}})").instant()
    board.with_panel(with_queries(rollbacks, reasons).span(8).height(8))
    board.with_panel(
        graph(
            "Rollback time: decision to every proxy's ACK",
            "s",
            "From the first failing sample (or the operator's command) to the last Envoy's ACK of the "
            "baseline-only config, over the rollbacks since the gateway started.",
            query(
                "histogram_quantile(0.99, sum by (rollout, le) "
                f"(graystack_rollback_seconds_bucket{{{ROLLOUT}}}))",
                "{{rollout}} p99",
            ),
            query(
                f"sum by (rollout) (graystack_rollback_seconds_sum{{{ROLLOUT}}}) / "
                f"sum by (rollout) (graystack_rollback_seconds_count{{{ROLLOUT}}})",
                "{{rollout}} mean",
            ),
        ).span(8)
    )
    board.with_panel(
        graph(
            "Envoy ACK convergence: converged vs connected proxies",
            "short",
            "Connected proxies, those that ACKed the latest version of every type, and those whose "
            "stream ended (no replica has them; they route by their last split): a gap that stays open "
            "is a proxy not running the config the controller chose.",
            query(f"sum by (namespace) (graystack_xds_connected_proxies{{{NAMESPACE}}})", "connected"),
            query(f"sum by (namespace) (graystack_xds_converged_proxies{{{NAMESPACE}}})", "converged"),
            query(
                f"sum by (namespace) (1 - max by (namespace, node) (graystack_xds_proxy_connected{{{NAMESPACE}}}))",
                "cut off (on their last split)",
            ),
        ).span(8)
    )
    board.with_panel(
        graph(
            "Controller alerts",
            "short",
            "Alerts the controller logged: rollbacks, freezes on unreadable metrics, unACKed rollbacks.",
            query(
                f"sum by (rollout) (increase(graystack_rollout_alerts_total{{{ROLLOUT}}}[{RATE}]))",
                "{{rollout}}",
            ),
        )
    )
    return board


def shadow_agreement() -> timeseries.Panel:
    """The candidate's greedy answers to shadow copies against the baseline's (inference/server/outputs.py):
    the share that agree on the left axis, the comparisons by result on the right."""
    comparisons = "graystack_shadow_comparisons_total"
    agreed = f'sum by (variant) (rate({comparisons}{{{VARIANT}, result="agree"}}[{RATE}]))'
    compared = f'sum by (variant) (rate({comparisons}{{{VARIANT}, result=~"agree|differ"}}[{RATE}]))'
    counts = [
        DynamicConfigValue(id_val="unit", value="short"),
        DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
    ]
    return graph(
        "Shadow agreement",
        "percentunit",
        "Left: the share of the candidate's greedy answers to shadow copies that equal the baseline's "
        "answer to the same request (answers are compared whole, so a close candidate agrees less "
        "often on longer answers). Right: comparisons per interval by result; `missing` (no baseline "
        "pod had the answer in time) is left out of the share, and a high count of it means the "
        "candidate's --compare-with does not reach the baseline pods. Empty outside a shadow stage and "
        "for a candidate served without --compare-with; sampled requests are never compared.",
        query(f"{agreed} / {compared}", "{{variant}} agreement"),
        query(
            f"sum by (variant, result) (increase({comparisons}{{{VARIANT}}}[{RATE}]))",
            "{{variant}} {{result}}",
        ),
    ).override_by_query("B", counts)


def variants_side_by_side() -> gd.Dashboard:
    board = base(
        "graystack-variants",
        "graystack / Variants side by side",
        "Baseline and zero-layer on the same axes: latency, TTFT against prompt length, errors, "
        "shadow copies, throughput, queues, skipped bias work, memory.",
    )
    board.with_row(gd.Row("Latency"))
    board.with_panel(
        quantiles(
            "Time to first token",
            "graystack_request_ttft_seconds",
            "From arrival to the first token, all prompt lengths (the model servers' histogram).",
        )
    )
    board.with_panel(
        graph(
            "TTFT p95 by prompt length",
            "s",
            "The story: the baseline's TTFT grows with the prompt (its bias layer scores every "
            "position pair); the zero-layer's stays flat where its bias is skipped.",
            query(
                quantile(0.95, "graystack_request_ttft_seconds", VARIANT, "variant, prompt_bucket"),
                "{{variant}} {{prompt_bucket}} tokens",
            ),
        )
    )
    board.with_panel(
        quantiles(
            "Inter-token latency",
            "graystack_request_inter_token_seconds",
            "Time between consecutive tokens of one request (one observation per engine step).",
        )
    )
    board.with_panel(
        quantiles(
            "End-to-end latency", "graystack_request_e2e_seconds", "Arrival to last token, answers 200."
        )
    )
    board.with_row(gd.Row("Errors and throughput"))
    board.with_panel(
        graph(
            "Error rate by code (model servers)",
            "percentunit",
            "Share of each variant's answers with a non-200 status, by code. A pod that is down or "
            "stalls answers nothing: see Envoy's view beside it.",
            query(
                f'sum by (variant, code) (rate(graystack_requests_total{{{VARIANT}, code!="200"}}[{RATE}])) '
                f"/ ignoring (code) group_left "
                f"sum by (variant) (rate(graystack_requests_total{{{VARIANT}}}[{RATE}]))",
                "{{variant}} {{code}}",
            ),
        )
    )
    board.with_panel(
        graph(
            "Envoy: responses by code and retried attempts",
            "reqps",
            "Per route cluster (`<variant>-with-fallback` retries a failed attempt on the fallback, "
            "so the client sees 200 while the variant failed): what the rollback guard counts.",
            query(
                rate(
                    "envoy_cluster_upstream_rq",
                    ROUTE_CLUSTER,
                    "envoy_cluster_name, envoy_response_code",
                ),
                "{{envoy_cluster_name}} {{envoy_response_code}}",
            ),
            query(
                rate("envoy_cluster_upstream_rq_retry", ROUTE_CLUSTER, "envoy_cluster_name"),
                "{{envoy_cluster_name}} retried",
            ),
        )
    )
    board.with_panel(
        graph(
            "Shadow copies (Envoy)",
            "reqps",
            "Mirrored copies of clients' requests that a shadow phase sends to `<variant>-shadow`, by "
            "response code: no client sees them, the rollout's checks count them as the variant's.",
            query(
                rate("envoy_cluster_upstream_rq", SHADOW_CLUSTER, "envoy_cluster_name, envoy_response_code"),
                "{{envoy_cluster_name}} {{envoy_response_code}}",
            ),
        )
    )
    board.with_panel(
        graph(
            "Requests per second",
            "reqps",
            "Answers per second from each variant's pods (probes' synthetic requests included).",
            query(rate("graystack_requests_total", VARIANT, "variant"), "{{variant}}"),
        )
    )
    board.with_panel(
        graph(
            "Tokens per second",
            "short",
            "Prompt tokens read and tokens generated per second.",
            query(rate("graystack_tokens_total", VARIANT, "variant, kind"), "{{variant}} {{kind}}"),
        )
    )
    board.with_row(gd.Row("Engine"))
    board.with_panel(
        graph(
            "Running and waiting requests",
            "short",
            "Requests in the decode batch and queued for it.",
            query(f"sum by (variant) (graystack_requests_running{{{VARIANT}}})", "{{variant}} running"),
            query(f"sum by (variant) (graystack_requests_waiting{{{VARIANT}}})", "{{variant}} waiting"),
        )
    )
    board.with_panel(
        graph(
            "Share of bias blocks skipped",
            "percentunit",
            "Attention key blocks whose relative-position-bias work was skipped: about 0 on the "
            "baseline, near 1 on a zero-layer pod whose bias is erased or zeroed.",
            query(
                f'sum by (variant) (rate(graystack_attention_bias_blocks_total{{{VARIANT}, result="skipped"}}'
                f"[{RATE}])) / sum by (variant) (rate(graystack_attention_bias_blocks_total{{{VARIANT}}}"
                f"[{RATE}]))",
                "{{variant}}",
            ),
        )
    )
    kv_cache = [
        DynamicConfigValue(id_val="unit", value="percentunit"),
        DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
    ]
    board.with_panel(
        graph(
            "Memory: process RSS and KV-cache usage",
            "bytes",
            "Each model server's resident memory (left axis; its process_* series carry no variant, "
            "so its pod's graystack_model_info names it) and the share of the KV cache in use (right "
            "axis, vLLM's name, which load-aware routers read): the memory that grows with load and "
            "context.",
            query(
                f"process_resident_memory_bytes{{{NAMESPACE}}} * {SERVER_VARIANT}",
                "{{variant}} {{instance}} RSS",
            ),
            query(f"sum by (variant) (vllm:kv_cache_usage_perc{{{VARIANT}}})", "{{variant}} KV cache"),
        ).override_by_query("B", kv_cache)
    )
    served = (
        table.Panel()
        .show_header(True)
        .title("Models served")
        .description("Each pod's model fingerprint, weight status and effective bias window.")
    )
    board.with_panel(
        with_queries(served, query(f"graystack_model_info{{{VARIANT}}}").instant()).span(24).height(6)
    )
    return board


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
    current = query(f"graystack_probe_weight_status{{{VARIANT}}} == 1", "{{variant}} {{instance}} {{status}}")
    board.with_panel(with_queries(status, current).span(24).height(8))
    board.with_panel(
        graph(
            "Synthetic requests by result",
            "reqps",
            "ok, or why a probe request failed (unreachable, http_error, ...).",
            query(
                rate("graystack_probe_requests_total", VARIANT, "variant, instance, result"),
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
            query(f"graystack_probe_fingerprint_match{{{VARIANT}}}", "{{variant}} {{instance}}"),
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
            query(f"graystack_probe_server_mismatch{{{VARIANT}}}", "{{variant}} {{instance}} {{reason}}"),
        )
    )
    board.with_panel(
        graph(
            "Probe latency p95",
            "s",
            "Synthetic requests' time to first token and end to end, straight to the pod.",
            query(quantile(0.95, "graystack_probe_ttft_seconds", VARIANT, "variant"), "{{variant}} TTFT"),
            query(quantile(0.95, "graystack_probe_e2e_seconds", VARIANT, "variant"), "{{variant}} e2e"),
        )
    )
    board.with_panel(
        graph(
            "Weight check time p95",
            "s",
            "Time to read the checkpoint header and the bias tensors.",
            query(quantile(0.95, "graystack_probe_weight_check_seconds", VARIANT, "variant"), "{{variant}}"),
        )
    )
    return board


def control_plane() -> gd.Dashboard:
    board = base(
        "graystack-control-plane",
        "graystack / Control plane",
        "The xDS control plane from both ends: the gateway's streams, pushes, NACKs and ACK latency, "
        "and each Envoy's own view of its connection and rejected updates.",
    )
    connected = (
        stat.Panel()
        .title("Connected and converged proxies")
        .reduce_options(gc.ReduceDataOptions().calcs(["lastNotNull"]))
        .description(
            "ADS streams open from Envoy proxies now (0: no proxy gets any change), and how many of "
            "them ACKed the latest version of every type."
        )
    )
    proxies = [
        query(f"sum(graystack_xds_{state}_proxies{{{NAMESPACE}}})", state)
        for state in ("connected", "converged")
    ]
    board.with_panel(with_queries(connected, *proxies).span(6).height(8))
    board.with_panel(
        graph(
            "Envoy: connected to the control plane",
            "short",
            "Each Envoy's control_plane.connected_state (1: its ADS stream is up).",
            query(f"envoy_control_plane_connected_state{{{NAMESPACE}}}", "{{instance}}"),
        ).span(18)
    )
    board.with_panel(
        graph(
            "Pushes per second by type",
            "short",
            "DiscoveryResponses sent (listeners, routes, clusters, endpoints).",
            query(rate("graystack_xds_pushes_total", NAMESPACE, "type"), "{{type}}"),
        )
    )
    board.with_panel(
        graph(
            "NACKs by type (gateway)",
            "short",
            "DiscoveryResponses a proxy rejected: the proxy keeps its last good config.",
            query(f"sum by (type) (increase(graystack_xds_nacks_total{{{NAMESPACE}}}[{RATE}]))", "{{type}}"),
        )
    )
    board.with_panel(
        graph(
            "Rejected updates (Envoy's view)",
            "short",
            "Updates each Envoy refused, by API; the gateway's NACK count, seen from the proxy.",
            query(
                f"sum by (instance) (envoy_listener_manager_lds_update_rejected{{{NAMESPACE}}})",
                "{{instance}} LDS",
            ),
            query(f"sum by (instance) (envoy_http_rds_update_rejected{{{NAMESPACE}}})", "{{instance}} RDS"),
            query(
                f"sum by (instance) (envoy_cluster_manager_cds_update_rejected{{{NAMESPACE}}})",
                "{{instance}} CDS",
            ),
            query(f"sum by (instance) (envoy_cluster_update_rejected{{{NAMESPACE}}})", "{{instance}} EDS"),
        )
    )
    board.with_panel(
        graph(
            "ACK latency",
            "s",
            "From sending a DiscoveryResponse to the proxy's ACK.",
            *(
                query(quantile(q, "graystack_xds_ack_seconds", NAMESPACE, "namespace"), f"p{round(q * 100)}")
                for q in QUANTILES
            ),
        )
    )
    board.with_panel(
        graph(
            "Spec reloads by result",
            "short",
            "Spec changes applied or refused (a refused spec leaves the last good one live).",
            query(
                f"sum by (result) (increase(graystack_spec_reloads_total{{{NAMESPACE}}}[{RATE}]))",
                "{{result}}",
            ),
        )
    )
    return board


DASHBOARDS: dict[str, Callable[[], gd.Dashboard]] = {
    "rollout-decisions": rollout_decisions,
    "variants": variants_side_by_side,
    "probes": probes,
    "control-plane": control_plane,
}


def render(name: str) -> str:
    """The dashboard's JSON as committed: sorted keys, two-space indent, a final newline."""
    built = DASHBOARDS[name]().build()
    return json.dumps(json.loads(JSONEncoder().encode(built)), sort_keys=True, indent=2) + "\n"


def queries(board: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and annotation of a rendered dashboard: what the tests
    send to Prometheus. `where` is `<panel title> [refId]` or `annotation <name>`."""
    found = [
        (f"{panel['title']} [{target['refId']}]", target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    found += [(f"annotation {a['name']}", a["expr"]) for a in board.get("annotations", {}).get("list", [])]
    return found
