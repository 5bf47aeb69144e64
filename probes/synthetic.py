"""One synthetic streaming request to the local model server, timed like a user would feel it."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

ZERO_LAYER_SUFFIX = "-zero-layer-v1"


@dataclass(frozen=True)
class ProbeResult:
    result: str  # ok | http_error | timeout | unreachable | bad_response | fingerprint_mismatch
    detail: str = ""
    ttft: float | None = None
    e2e: float | None = None
    fingerprint: str | None = None


def fingerprint_matches(variant: str, fingerprint: str | None) -> bool:
    """zero-layer pods must say `-zero-layer-v1`; any other variant must not."""
    if not fingerprint:
        return False
    return fingerprint.endswith(ZERO_LAYER_SUFFIX) == (variant == "zero-layer")


async def probe_once(client: httpx.AsyncClient, variant: str, seconds: float) -> ProbeResult:
    """The whole exchange is bounded by `seconds`: a server that trickles tokens is a timeout too."""
    body = {
        "model": "graystack-probe",
        "max_tokens": 8,
        "stream": True,
        "messages": [{"role": "user", "content": "ping"}],
    }
    started = time.monotonic()
    ttft = None
    try:
        async with asyncio.timeout(seconds), client.stream("POST", "/v1/messages", json=body) as response:
            fingerprint = response.headers.get("x-model-fingerprint")
            if response.status_code != 200:
                await response.aread()
                return ProbeResult("http_error", f"HTTP {response.status_code}", fingerprint=fingerprint)
            stopped = False
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                if event.get("type") == "content_block_delta" and ttft is None:
                    ttft = time.monotonic() - started
                if event.get("type") == "error":
                    return ProbeResult("http_error", str(event.get("error")), fingerprint=fingerprint)
                stopped = stopped or event.get("type") == "message_stop"
    except (TimeoutError, httpx.TimeoutException):
        return ProbeResult("timeout", f"no complete answer within {seconds}s")
    except httpx.TransportError as error:
        return ProbeResult("unreachable", f"{type(error).__name__}: {error}")
    except (ValueError, AttributeError) as error:  # not JSON, or not the events the API promises
        return ProbeResult("bad_response", f"unreadable stream: {error}")
    e2e = time.monotonic() - started
    if not stopped:
        return ProbeResult("bad_response", "stream ended without message_stop", ttft, e2e, fingerprint)
    if not fingerprint_matches(variant, fingerprint):
        return ProbeResult(
            "fingerprint_mismatch", f"x-model-fingerprint {fingerprint!r}", ttft, e2e, fingerprint
        )
    return ProbeResult("ok", "", ttft, e2e, fingerprint)
