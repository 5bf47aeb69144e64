"""The metric family names a pod exports (its model server's and its probe sidecar's) and vLLM's, which
the gateway also reads: each defined here once, as PromQL and a parsed /metrics page name them (a
counter with its `_total`). docs/architecture.md tables them with their labels.

A leaf of plain strings on the bottom floor: the model server and the probe export these families, and
the gateway's providers, the console, the dashboards and the alert rules read them; every package may
import `inference`, and every image ships it (the slim gateway and probe images too, without torch).
The gateway's own families and Envoy's are in gateway/families.py.
"""

# The model server (inference/server/telemetry.py)
REQUESTS = "graystack_requests_total"
REQUEST_TTFT = "graystack_request_ttft_seconds"
REQUEST_INTER_TOKEN = "graystack_request_inter_token_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN = "graystack_request_time_per_output_token_seconds"
REQUEST_E2E = "graystack_request_e2e_seconds"
TOKENS = "graystack_tokens_total"
REQUESTS_RUNNING = "graystack_requests_running"
REQUESTS_WAITING = "graystack_requests_waiting"
ATTENTION_BIAS_BLOCKS = "graystack_attention_bias_blocks_total"
SHADOW_COMPARISONS = "graystack_shadow_comparisons_total"
MODEL_INFO = "graystack_model_info"
ENGINE_DECODE_BATCH_SIZE = "graystack_engine_decode_batch_size"

# The probe sidecar (probes/telemetry.py)
PROBE_WEIGHT_STATUS = "graystack_probe_weight_status"
PROBE_WEIGHT_CHECKS = "graystack_probe_weight_checks_total"
PROBE_WEIGHT_CHECK_SECONDS = "graystack_probe_weight_check_seconds"
PROBE_TTFT = "graystack_probe_ttft_seconds"
PROBE_E2E = "graystack_probe_e2e_seconds"
PROBE_REQUESTS = "graystack_probe_requests_total"
PROBE_FINGERPRINT_MATCH = "graystack_probe_fingerprint_match"
PROBE_INFO = "graystack_probe_info"
PROBE_SERVER_MISMATCH = "graystack_probe_server_mismatch"

# vLLM's: the model server exports its queue and KV-cache gauges under these names (load-aware routers
# read them); the gateway reads a vLLM server's latency histograms and token counter as they are.
VLLM_NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
VLLM_NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
