"""The Variants side by side dashboard: baseline and candidate on the same axes."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from gateway.families import (
    ANSWERS,
    ENVOY_UPSTREAM_RQ,
    ENVOY_UPSTREAM_RQ_RETRY,
    GEN_AI_TOKEN_USAGE,
    GEN_AI_TPOT,
    GEN_AI_TTFT,
)
from graystack.observability.dashboards.capacity import cost_per_million_tokens, pods
from graystack.observability.dashboards.panels import base, graph, quantiles, query, with_queries
from graystack.observability.promql import (
    NAMESPACE,
    RATE,
    ROUTE_CLUSTER,
    SERVER_VARIANT,
    SHADOW_CLUSTER,
    VARIANT,
    quantile,
    rate,
)
from inference.families import (
    ATTENTION_BIAS_BLOCKS,
    MODEL_INFO,
    REQUEST_E2E,
    REQUEST_INTER_TOKEN,
    REQUEST_TTFT,
    REQUESTS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    TOKENS,
    VLLM_KV_CACHE_USAGE,
)


def variants_side_by_side() -> gd.Dashboard:
    board = base(
        "graystack-variants",
        "graystack / Variants side by side",
        "Baseline and zero-layer on the same axes: latency, TTFT against prompt length, errors, "
        "shadow copies, throughput, queues, skipped bias work, memory, and each variant's pods and "
        "cost per generated token.",
    )
    board.with_row(gd.Row("Latency"))
    board.with_panel(
        quantiles(
            "Time to first token (measured by the gateway)",
            GEN_AI_TTFT,
            "From the request to the first event carrying generated content, every answer, any server: "
            "Envoy measures it (gateway/answers/), so a server that exports no histogram is seen too.",
        )
    )
    board.with_panel(
        graph(
            "TTFT p95 by prompt length",
            "s",
            "The story: the baseline's TTFT grows with the prompt (its bias layer scores every "
            "position pair); the zero-layer's stays flat where its bias is skipped (the model "
            "servers' histogram, bucketed by prompt tokens).",
            query(
                quantile(0.95, REQUEST_TTFT, VARIANT, "variant, prompt_bucket"),
                "{{variant}} {{prompt_bucket}} tokens",
            ),
        )
    )
    board.with_panel(
        quantiles(
            "Time per output token (measured by the gateway)",
            GEN_AI_TPOT,
            "Each streamed answer's mean gap between its tokens after the first, any server.",
        )
    )
    board.with_panel(
        quantiles(
            "Time to first token (the model servers' own histogram)",
            REQUEST_TTFT,
            "The servers' view from arrival, where a server exports it: a cross-check of the gateway's.",
        )
    )
    board.with_panel(
        quantiles(
            "Inter-token latency",
            REQUEST_INTER_TOKEN,
            "Time between consecutive tokens of one request (one observation per engine step).",
        )
    )
    board.with_panel(quantiles("End-to-end latency", REQUEST_E2E, "Arrival to last token, answers 200."))
    board.with_row(gd.Row("Errors and throughput"))
    board.with_panel(
        graph(
            "Error rate by code (model servers)",
            "percentunit",
            "Share of each variant's answers with a non-200 status, by code. A pod that is down or "
            "stalls answers nothing: see Envoy's view beside it.",
            query(
                f'sum by (variant, code) (rate({REQUESTS}{{{VARIANT}, code!="200"}}[{RATE}])) '
                f"/ ignoring (code) group_left "
                f"sum by (variant) (rate({REQUESTS}{{{VARIANT}}}[{RATE}]))",
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
                    ENVOY_UPSTREAM_RQ,
                    ROUTE_CLUSTER,
                    "envoy_cluster_name, envoy_response_code",
                ),
                "{{envoy_cluster_name}} {{envoy_response_code}}",
            ),
            query(
                rate(ENVOY_UPSTREAM_RQ_RETRY, ROUTE_CLUSTER, "envoy_cluster_name"),
                "{{envoy_cluster_name}} retried",
            ),
        )
    )
    board.with_panel(
        graph(
            "How answers ended",
            "percentunit",
            "Share of each variant's measured answers by how they ended: complete, error (an error "
            "status, or an error event or chunk mid-stream), cut (ended before the format's final "
            "event), client_gone (the client left); the error tests count an error or a cut after a "
            "success status. And the share that stopped on `length`: not an error, but a candidate "
            "that stops on max_tokens where the baseline stops on its own shows here.",
            query(
                f"sum by (variant, ending) (rate({ANSWERS}{{{VARIANT}}}[{RATE}])) "
                f"/ ignoring (ending) group_left sum by (variant) (rate({ANSWERS}{{{VARIANT}}}[{RATE}]))",
                "{{variant}} {{ending}}",
            ),
            query(
                f'sum by (variant) (rate({ANSWERS}{{{VARIANT}, finish="length"}}[{RATE}])) '
                f"/ sum by (variant) (rate({ANSWERS}{{{VARIANT}}}[{RATE}]))",
                "{{variant}} length",
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
                rate(ENVOY_UPSTREAM_RQ, SHADOW_CLUSTER, "envoy_cluster_name, envoy_response_code"),
                "{{envoy_cluster_name}} {{envoy_response_code}}",
            ),
        )
    )
    board.with_panel(
        graph(
            "Requests per second",
            "reqps",
            "Answers per second from each variant's pods (probes' synthetic requests included).",
            query(rate(REQUESTS, VARIANT, "variant"), "{{variant}}"),
        )
    )
    board.with_panel(
        graph(
            "Tokens per second",
            "short",
            "Prompt tokens read and tokens generated per second, as the model servers count them, and "
            "the output tokens of the answers the gateway measured (any server; shadow copies not "
            "measured), which the cost panel divides by.",
            query(rate(TOKENS, VARIANT, "variant, kind"), "{{variant}} {{kind}}"),
            query(
                f'sum by (variant) (rate({GEN_AI_TOKEN_USAGE}_sum{{{VARIANT}, gen_ai_token_type="output"}}'
                f"[{RATE}]))",
                "{{variant}} output (gateway)",
            ),
        )
    )
    board.with_row(gd.Row("Engine"))
    board.with_panel(
        graph(
            "Running and waiting requests",
            "short",
            "Requests in the decode batch and queued for it.",
            query(f"sum by (variant) ({REQUESTS_RUNNING}{{{VARIANT}}})", "{{variant}} running"),
            query(f"sum by (variant) ({REQUESTS_WAITING}{{{VARIANT}}})", "{{variant}} waiting"),
        )
    )
    board.with_panel(
        graph(
            "Share of bias blocks skipped",
            "percentunit",
            "Attention key blocks whose relative-position-bias work was skipped: about 0 on the "
            "baseline, near 1 on a zero-layer pod whose bias is erased or zeroed.",
            query(
                f'sum by (variant) (rate({ATTENTION_BIAS_BLOCKS}{{{VARIANT}, result="skipped"}}'
                f"[{RATE}])) / sum by (variant) (rate({ATTENTION_BIAS_BLOCKS}{{{VARIANT}}}"
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
            query(f"sum by (variant) ({VLLM_KV_CACHE_USAGE}{{{VARIANT}}})", "{{variant}} KV cache"),
        ).override_by_query("B", kv_cache)
    )
    served = (
        table.Panel()
        .show_header(True)
        .title("Models served")
        .description("Each pod's model fingerprint, weight status and effective bias window.")
    )
    board.with_panel(with_queries(served, query(f"{MODEL_INFO}{{{VARIANT}}}").instant()).span(24).height(6))
    board.with_row(gd.Row("Capacity and cost"))
    board.with_panel(pods())
    board.with_panel(cost_per_million_tokens())
    return board
