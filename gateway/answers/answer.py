"""One answer as the gateway measured it: plain, frozen data, for any server and either wire format.

How a stream ended (`ending`):
    complete     the body ended with the format's final event (`[DONE]` or a `finish_reason` on a chat
                 stream, `message_stop` on a Messages stream, `response.completed` or `.incomplete` on
                 a Responses stream), or a whole non-streamed body
    error        an error after the answer started (`event: error`, a `{"error": ...}` chunk or body), or
                 an HTTP status of 400 or more
    cut          the stream ended, or was reset (upstream reset, timeout), before its final event
    client_gone  the client went away before the answer ended
`finish`: stop, length, tool_call, filter, other (the server's reason, named alike for both formats),
error when the answer ended in one, None where the server gave none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Ending = Literal["complete", "error", "cut", "client_gone"]
Api = Literal["chat", "messages", "completions", "count_tokens", "responses", "embeddings", "other"]

_FINISH = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "eos": "stop",
    "completed": "stop",
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_calls": "tool_call",
    "tool_use": "tool_call",
    "function_call": "tool_call",
    "content_filter": "filter",
    "refusal": "filter",
}


def finish_of(raw: str | None, ending: Ending) -> str | None:
    """The server's finish or stop reason, one name for both formats."""
    if ending == "error":
        return "error"
    if raw is None:
        return None
    return _FINISH.get(raw, "other")


@dataclass(frozen=True)
class Answer:
    """One routed request. Times in seconds; `started_at` since the epoch (Envoy's request start).

    `variant`: the variant the split chose (its fallback aggregate resolved); `answered_by`: the variant of
    the host that answered, as Envoy knew it (its endpoint's metadata, gateway/envoy/variant_header.py),
    the fallback after a fallback retry. `named`: the variant the server named itself, where it did (a
    graystack server names its model form): information only, never what the answer is counted as; where
    it differs from `answered_by`, a deployment mix-up worth telling (`misnamed`). `prompt_bucket`:
    the servers' `prompt_bucket` ranges applied to the request body's bytes, which every server has (a
    token count comes only where a server sends `usage`), so both variants' answers to like prompts share
    a stratum. `ttft`: to the first event carrying generated content (a non-streamed answer: its first
    body byte). `itl`: the inter-token latency, the mean time per output token after the first (as
    OpenTelemetry and vLLM export it: `time_per_output_token`), on streams of two tokens or more.
    `tokens_counted`: `output_tokens` counts content events (no `usage` arrived). `unreadable`: lines
    and events the filter could not place (malformed SSE, unknown events, parse failures). `shadow`: a
    mirrored copy, whose answer went to no client (gateway/envoy/shadow.py). `affinity`: the
    `routing.affinity` source that gave the request its client key (`header:x-user-id`, `body:user`), so
    its variant was the key's cohort; None: no key, split at random (or no affinity configured). `client`:
    that key as a 64-bit digest (the key itself, a user id, is never kept), so the analysis can count a
    client once (gateway/metrics/client_units.py).

    Answer capture (`analysis.quality`, gateway/envoy/capture.py): `request_id`, Envoy's x-request-id, which
    a mirrored copy shares with its original (gateway/answers/pairs.py pairs them). `captured`: the answer
    was sampled; `text` and `calls` (tool-call arguments) are its content, None where not captured or not
    readable (`text_unreadable`: not UTF-8, or not the JSON the API sends); `truncated`: cut at
    `max_answer_bytes`. The request's `temperature`, `response_format` (its type), `schema_given` (it gave a
    JSON schema) and `tools` (it gave tools), where its body was read."""

    variant: str
    answered_by: str | None
    segment: str
    api: Api
    streamed: bool
    status: int
    prompt_bytes: int
    prompt_bucket: str
    started_at: float
    ttft: float | None
    itl: float | None
    duration: float | None
    input_tokens: int | None
    output_tokens: int | None
    tokens_counted: bool
    finish: str | None
    ending: Ending
    error_type: str | None = None
    unreadable: int = 0
    shadow: bool = False
    affinity: str | None = None
    client: int | None = None
    request_id: str | None = None
    captured: bool = False
    text: str | None = None
    calls: str | None = None
    truncated: bool = False
    text_unreadable: bool = False
    temperature: float | None = None
    response_format: str | None = None
    schema_given: bool = False
    tools: bool = False
    named: str | None = None

    @property
    def failed(self) -> bool:
        """A failure the client saw: a 5xx, or a stream that failed after it started (`error`, `cut`)."""
        return self.status >= 500 or self.failed_after_start

    @property
    def failed_after_start(self) -> bool:
        """Failed after a success status went out: invisible to Envoy's response-code counters."""
        return self.status < 400 and self.ending in ("error", "cut")

    @property
    def server(self) -> str:
        """The variant whose host answered: `answered_by`, else the split's choice."""
        return self.answered_by or self.variant

    @property
    def fell_back(self) -> bool:
        """A fallback retry moved the answer to another variant's host: its times are not its variant's."""
        return self.server != self.variant

    @property
    def misnamed(self) -> str | None:
        """The name the server gave itself, where it is not the variant of the host Envoy sent it to."""
        return self.named if self.named not in (None, self.server) else None
