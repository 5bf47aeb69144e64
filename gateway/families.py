"""The metric family names the gateway exports, and the Envoy families it reads: each defined here once,
as PromQL and a parsed /metrics page name them (a counter with its `_total`). docs/architecture.md
tables them with their labels.

A leaf of plain strings on gateway's bottom floor, so that xds/ and rollout/ (which export them),
metrics/ (which reads Envoy's) and the dashboards and alert rules above all import them. The pods'
families and vLLM's are in inference/families.py.
"""

# xDS (gateway/xds/telemetry.py)
XDS_CONNECTED_PROXIES = "graystack_xds_connected_proxies"
XDS_CONVERGED_PROXIES = "graystack_xds_converged_proxies"
XDS_PROXY_CONNECTED = "graystack_xds_proxy_connected"
XDS_PUSHES = "graystack_xds_pushes_total"
XDS_NACKS = "graystack_xds_nacks_total"
XDS_ACK_SECONDS = "graystack_xds_ack_seconds"

# The answers the gateway measured (gateway/answers/telemetry.py)
ANSWERS_RECEIVED = "graystack_answers_received_total"
ANSWERS_EVICTED = "graystack_answers_evicted_total"
ANSWERS = "graystack_answers_total"
ANSWERS_MISNAMED = "graystack_answers_misnamed_total"
# ... named after the OpenTelemetry GenAI semantic conventions (gen_ai.server.time_to_first_token,
# gen_ai.server.time_per_output_token, gen_ai.client.token.usage), as Prometheus names them
GEN_AI_TTFT = "gen_ai_server_time_to_first_token_seconds"
GEN_AI_TPOT = "gen_ai_server_time_per_output_token_seconds"
GEN_AI_TOKEN_USAGE = "gen_ai_client_token_usage"

# The Endpoint Picker (gateway/epp/telemetry.py)
EPP_PICKS = "graystack_epp_picks_total"
EPP_UNCHANGED = "graystack_epp_unchanged_total"
EPP_UNREAD = "graystack_epp_unread_total"
EPP_FALLBACK_SCORES = "graystack_epp_fallback_scores_total"

# The rollout (gateway/rollout/telemetry.py)
ROLLOUT_WEIGHT = "graystack_rollout_weight"
ROLLOUT_SEGMENT_WEIGHT = "graystack_rollout_segment_weight"
SPEC_RELOADS = "graystack_spec_reloads_total"
ROLLOUT_PHASE = "graystack_rollout_phase"
ROLLOUT_ROLLBACKS = "graystack_rollout_rollbacks_total"
ROLLOUT_ALERTS = "graystack_rollout_alerts_total"
ROLLOUT_SHARED_INCIDENTS = "graystack_rollout_shared_incidents_total"
ROLLBACK_SECONDS = "graystack_rollback_seconds"
ANALYSIS_CHECKS = "graystack_analysis_checks_total"
ANALYSIS_CHECK_VALUE = "graystack_analysis_check_value"
ANALYSIS_CHECK_THRESHOLD = "graystack_analysis_check_threshold"
ANALYSIS_CHECK_SAMPLES = "graystack_analysis_check_samples"
ANALYSIS_LOG_EVALUE = "graystack_analysis_log_evalue"
ANALYSIS_LOG_EVALUE_BOUND = "graystack_analysis_log_evalue_bound"
ANALYSIS_ERROR_RATE_BOUND = "graystack_analysis_error_rate_bound"
EXPERIMENT_DIFFERENCE = "graystack_experiment_difference"
VARIANT_REPLICAS = "graystack_variant_replicas"
VARIANT_COST_PER_HOUR = "graystack_variant_cost_per_hour"

# The rollout's notifications (gateway/notify/telemetry.py)
NOTIFICATIONS = "graystack_notifications_total"
NOTIFICATION_QUEUE_DROPPED = "graystack_notification_queue_dropped_total"
NOTIFICATION_QUEUE_DEPTH = "graystack_notification_queue_depth"

# Envoy's, read as Envoy's /stats/prometheus names them (a counter without `_total`; prometheus_client's
# parser appends one). `upstream_rq` carries `envoy_response_code`; `upstream_rq_total` counts every
# attempt. Label: `envoy_cluster_name`.
ENVOY_UPSTREAM_RQ = "envoy_cluster_upstream_rq"
ENVOY_UPSTREAM_RQ_TOTAL = "envoy_cluster_upstream_rq_total"
ENVOY_UPSTREAM_RQ_RETRY = "envoy_cluster_upstream_rq_retry"
ENVOY_UPSTREAM_RQ_RETRY_SUCCESS = "envoy_cluster_upstream_rq_retry_success"
ENVOY_UPSTREAM_RQ_RETRY_LIMIT_EXCEEDED = "envoy_cluster_upstream_rq_retry_limit_exceeded"
ENVOY_UPSTREAM_RQ_PENDING_FAILURE_EJECT = "envoy_cluster_upstream_rq_pending_failure_eject"
