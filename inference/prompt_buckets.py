"""The `prompt_bucket` ranges latency is stratified by: the model server labels its TTFT histogram with
them (inference/server/telemetry.py) and the gateway buckets the answers it measures by them
(gateway/answers/). No dependencies, so the slim gateway image imports it."""

from __future__ import annotations

import bisect

PROMPT_BUCKET_EDGES = (128, 512, 2048, 8192)  # prompt tokens; the default context holds 10,240


def prompt_bucket(tokens: int) -> str:
    """The `prompt_bucket` label of a prompt: one of a handful of ranges, e.g. `129-512`."""
    index = bisect.bisect_left(PROMPT_BUCKET_EDGES, tokens)
    if index == len(PROMPT_BUCKET_EDGES):
        return f"{PROMPT_BUCKET_EDGES[-1] + 1}+"
    low = PROMPT_BUCKET_EDGES[index - 1] + 1 if index else 0
    return f"{low}-{PROMPT_BUCKET_EDGES[index]}"
