"""The answer receiver's metric families (their names: gateway/families.py): how many measurements
arrived, so "measurements missing" can be told from "no traffic" on a dashboard too; and each answer's
own measurements, for any server, named after the OpenTelemetry GenAI semantic conventions (time to
first token, time per output token, token usage by type) with graystack's labels (variant, segment,
prompt bucket), in the model server's bucket edges (inference/latency_buckets.py)."""

from prometheus_client import Counter, Histogram

from gateway import families
from gateway.answers.answer import Answer
from inference.latency_buckets import INTER_TOKEN_BUCKETS, TTFT_BUCKETS

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)  # OTel's advice

RECEIVED = Counter(
    families.ANSWERS_RECEIVED,
    "Access-log entries the gateway received from Envoy, by result: kept (a variant's answer), ignored "
    "(no variant's cluster was chosen), unreadable",
    ["result"],
)
EVICTED = Counter(
    families.ANSWERS_EVICTED, "Measured answers dropped from the full store before a look read them"
)
for _result in ("kept", "ignored", "unreadable"):
    RECEIVED.labels(_result)

ANSWERS = Counter(
    families.ANSWERS,
    "Answers the gateway measured, by the variant whose server answered, how each ended (complete, "
    "error, cut, client_gone) and its finish reason (stop, length, tool_call, filter, other, error, none)",
    ["variant", "segment", "api", "ending", "finish"],
)
MISNAMED = Counter(
    families.ANSWERS_MISNAMED,
    "Answers whose server named itself (x-graystack-variant) other than the variant Envoy sent them to, "
    "by that variant and the server's name: a deployment mix-up; the answer still counts as the variant's",
    ["variant", "named"],
)
TTFT = Histogram(
    families.GEN_AI_TTFT,
    "Time from the request to the first event carrying generated content (a non-streamed answer: its "
    "first body byte), as Envoy saw it",
    ["variant", "segment", "prompt_bucket"],
    buckets=TTFT_BUCKETS,
)
ITL = Histogram(
    families.GEN_AI_TPOT,
    "Each streamed answer's mean time per output token after the first",
    ["variant", "segment"],
    buckets=INTER_TOKEN_BUCKETS,
)
TOKEN_USAGE = Histogram(
    families.GEN_AI_TOKEN_USAGE,
    "Tokens per answer, by type (input, output): the server's `usage`, else content events counted",
    ["variant", "segment", "gen_ai_token_type"],
    buckets=TOKEN_BUCKETS,
)


def record(answer: Answer) -> None:
    variant, segment = answer.server, answer.segment
    ANSWERS.labels(variant, segment, answer.api, answer.ending, answer.finish or "none").inc()
    if (named := answer.misnamed) is not None:
        MISNAMED.labels(variant, named).inc()
    if answer.ttft is not None:
        TTFT.labels(variant, segment, answer.prompt_bucket).observe(answer.ttft)
    if answer.itl is not None:
        ITL.labels(variant, segment).observe(answer.itl)
    for kind, tokens in (("input", answer.input_tokens), ("output", answer.output_tokens)):
        if tokens is not None:
            TOKEN_USAGE.labels(variant, segment, kind).observe(tokens)
