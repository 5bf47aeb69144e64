"""The Rollout decisions dashboard: why a rollout moved."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import statetimeline, table, timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from gateway.families import (
    ANALYSIS_CHECK_SAMPLES,
    ANALYSIS_CHECK_THRESHOLD,
    ANALYSIS_CHECK_VALUE,
    ANALYSIS_CHECKS,
    ANALYSIS_ERROR_RATE_BOUND,
    ANALYSIS_LOG_EVALUE,
    ANALYSIS_LOG_EVALUE_BOUND,
    EXPERIMENT_DIFFERENCE,
    ROLLBACK_SECONDS,
    ROLLOUT_ALERTS,
    ROLLOUT_PHASE,
    ROLLOUT_ROLLBACKS,
    ROLLOUT_SEGMENT_WEIGHT,
    XDS_CONNECTED_PROXIES,
    XDS_CONVERGED_PROXIES,
    XDS_PROXY_CONNECTED,
)
from graystack.observability.dashboards.panels import DATASOURCE, base, graph, query, with_queries
from graystack.observability.promql import NAMESPACE, RATE, ROLLOUT, ROLLOUT_VARIANT, VARIANT
from inference.families import SHADOW_COMPARISONS

# The rollout analysis' checks that carry a value (gateway/rollout/plan.py CHECK_NAMES), and its unit.
# The others are drawn on the evidence panel only: error_rate_change and itl_vs_baseline have no value,
# error_ratio's (the candidate's error rate over the baseline's) and structure's (its malformed share
# over the baseline's) have none while the baseline has none, which is most of the time, and the
# judge's (its loss share) none while every verdict is a tie.
CHECKS = {
    "error_rate": "percentunit",
    "ttft_p95": "percentunit",
    "ttft_vs_baseline": "none",
    "weight_status": "none",
    "shadow_agreement": "percentunit",  # last: its own panel of compared answers sits beside it
}
# What a check's panel needs said beyond its value and threshold.
CHECK_NOTES = {
    "error_rate": " The value is the candidate's error rate over the rollout; the threshold is max_error_rate.",
    "ttft_p95": " The share of first tokens above the SLO (max_ttft_p95), against 5 %.",
    "ttft_vs_baseline": " The candidate's mean TTFT over the baseline's this stage (the shadow gate's "
    "ratio); the test itself compares the distributions against max_latency_ratio.",
    "shadow_agreement": " Only with analysis.min_shadow_agreement or quality.max_greedy_disagreement set, "
    "in a shadow stage: its threshold is a floor (below it fails).",
}


def phase_change(phase: str, name: str, color: str) -> gd.AnnotationQuery:
    """A mark where a rollout entered `phase`: 1 now and not 1 one step earlier."""
    entered = f'max by (namespace, rollout) ({ROLLOUT_PHASE}{{{ROLLOUT}, phase="{phase}"}}) == 1'
    before = (
        f'max by (namespace, rollout) ({ROLLOUT_PHASE}{{{ROLLOUT}, phase="{phase}"}} offset $__interval) == 1'
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
                f"{ROLLOUT_SEGMENT_WEIGHT}{{{ROLLOUT_VARIANT}}}",
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
        with_queries(phase, query(f"{ROLLOUT_PHASE}{{{ROLLOUT}}} == 1", "{{rollout}} {{phase}}"))
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
            query(f"{ANALYSIS_LOG_EVALUE}{{{ROLLOUT}}}", "{{rollout}} {{check}}"),
            query(f"{ANALYSIS_LOG_EVALUE_BOUND}{{{ROLLOUT}}}", "{{rollout}} {{check}} bound"),
        ).span(16)
    )
    board.with_panel(
        graph(
            "Candidate error rate: anytime confidence bounds",
            "percentunit",
            "The candidate's error rate over the rollout, with confidence bounds valid at every look at "
            "once (a confidence sequence), against max_error_rate.",
            query(f"{ANALYSIS_ERROR_RATE_BOUND}{{{ROLLOUT}}}", "{{rollout}} {{side}}"),
            query(f'{ANALYSIS_CHECK_VALUE}{{{ROLLOUT}, check="error_rate"}}', "{{rollout}} rate"),
            query(
                f'{ANALYSIS_CHECK_THRESHOLD}{{{ROLLOUT}, check="error_rate"}}',
                "{{rollout}} threshold",
            ),
        ).span(8)
    )
    board.with_row(gd.Row("Experiment (strategy: experiment)"))
    for title, unit, which, words in (
        ("latency, candidate over baseline", "none", "ttft_.*|tpot_.*", "TTFT and time per output token at p50 "
         "and p90, candidate over baseline: a line at 1 is no difference"),
        ("error rate, candidate minus baseline", "percentunit", "error_rate", "The error rates' difference: "
         "a line at 0 is no difference"),
        ("quality", "percentunit", "structure_failures|greedy_agreement|judge_win_rate", "Where quality is on: "
         "the malformed answers' difference (0: none), the greedy answers equal to the baseline's (1: all) and "
         "the candidate's share of the judge's decisive verdicts (0.5: neither better)"),
    ):  # fmt: skip
        board.with_panel(
            graph(
                f"Experiment: {title}",
                unit,
                f"{words}. Each estimate with its interval, valid at every look at once (a confidence "
                "sequence); decided once the interval leaves out the no-difference line.",
                query(
                    f'{EXPERIMENT_DIFFERENCE}{{{ROLLOUT}, difference=~"{which}"}}', "{{difference}} {{side}}"
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
                query(f"{ANALYSIS_CHECK_VALUE}{{{selector}}}", "{{rollout}} value"),
                query(f"{ANALYSIS_CHECK_THRESHOLD}{{{selector}}}", "{{rollout}} threshold"),
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
                f"sum by (check, result) (increase({ANALYSIS_CHECKS}{{{ROLLOUT}}}[{RATE}]))",
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
            query(f"{ANALYSIS_CHECK_SAMPLES}{{{ROLLOUT}}}", "{{rollout}} {{check}}"),
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
    reasons = query(f"sum by (rollout, reason) ({ROLLOUT_ROLLBACKS}{{{ROLLOUT}}})").instant()
    board.with_panel(with_queries(rollbacks, reasons).span(8).height(8))
    board.with_panel(
        graph(
            "Rollback time: decision to every proxy's ACK",
            "s",
            "From the first failing sample (or the operator's command) to the last Envoy's ACK of the "
            "baseline-only config, over the rollbacks since the gateway started.",
            query(
                f"histogram_quantile(0.99, sum by (rollout, le) ({ROLLBACK_SECONDS}_bucket{{{ROLLOUT}}}))",
                "{{rollout}} p99",
            ),
            query(
                f"sum by (rollout) ({ROLLBACK_SECONDS}_sum{{{ROLLOUT}}}) / "
                f"sum by (rollout) ({ROLLBACK_SECONDS}_count{{{ROLLOUT}}})",
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
            query(f"sum by (namespace) ({XDS_CONNECTED_PROXIES}{{{NAMESPACE}}})", "connected"),
            query(f"sum by (namespace) ({XDS_CONVERGED_PROXIES}{{{NAMESPACE}}})", "converged"),
            query(
                f"sum by (namespace) (1 - max by (namespace, node) ({XDS_PROXY_CONNECTED}{{{NAMESPACE}}}))",
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
                f"sum by (rollout) (increase({ROLLOUT_ALERTS}{{{ROLLOUT}}}[{RATE}]))",
                "{{rollout}}",
            ),
        )
    )
    return board


def shadow_agreement() -> timeseries.Panel:
    """The candidate's greedy answers to shadow copies against the baseline's (inference/server/outputs.py):
    the share that agree on the left axis, the comparisons by result on the right."""
    agreed = f'sum by (variant) (rate({SHADOW_COMPARISONS}{{{VARIANT}, result="agree"}}[{RATE}]))'
    compared = f'sum by (variant) (rate({SHADOW_COMPARISONS}{{{VARIANT}, result=~"agree|differ"}}[{RATE}]))'
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
            f"sum by (variant, result) (increase({SHADOW_COMPARISONS}{{{VARIANT}}}[{RATE}]))",
            "{{variant}} {{result}}",
        ),
    ).override_by_query("B", counts)
