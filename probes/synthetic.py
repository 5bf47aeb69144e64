"""One synthetic streaming request to a model server, timed like a user would feel it.

Any server that speaks the Anthropic Messages or the OpenAI chat completions API (probes/wire.py:
what counts as content and as complete in each). TTFT is the time from sending the request to the
first event carrying generated text; e2e, to the end of a complete stream. The model asked for is
the one configured, or else the first of the server's GET /v1/models. The fingerprint check (a
response header, graystack's `x-model-fingerprint` by default) is optional: servers nobody here
wrote send none.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from probes.wire import Api, completion_marker, model_list_headers, read, request, sse_data

ZERO_LAYER_SUFFIX = "-zero-layer-v1"
FINGERPRINT_HEADER = "x-model-fingerprint"
ANSWERED = frozenset({"ok", "fingerprint_mismatch"})  # results of a complete stream


@dataclass(frozen=True)
class ProbeCheck:
    """What to ask and what to expect of the server."""

    variant: str
    api: Api = Api.ANTHROPIC
    model: str = ""  # empty: the first model the server lists
    fingerprint_header: str | None = FINGERPRINT_HEADER  # None: the fingerprint is not checked


@dataclass(frozen=True)
class ProbeResult:
    result: str  # ok | http_error | timeout | unreachable | bad_response | fingerprint_mismatch
    detail: str = ""
    ttft: float | None = None
    e2e: float | None = None
    fingerprint: str | None = None
    model: str | None = None  # the model asked for, once known
    # OpenAI chunks' system_fingerprint: the first non-empty one, else "" if a chunk sent "", else None
    system_fingerprint: str | None = None


class _Refused(Exception):
    """The server answered, but not with a usable stream: the result it makes."""

    def __init__(self, result: ProbeResult) -> None:
        super().__init__(result.detail)
        self.result = result


def fingerprint_matches(variant: str, fingerprint: str | None) -> bool:
    """zero-layer pods must say `-zero-layer-v1`; any other variant must not."""
    if not fingerprint:
        return False
    return fingerprint.endswith(ZERO_LAYER_SUFFIX) == (variant == "zero-layer")


async def listed_model(client: httpx.AsyncClient, api: Api) -> str:
    """The first model of the server's GET /v1/models (both APIs' lists have `data[].id`)."""
    response = await client.get("/v1/models", headers=model_list_headers(api))
    if response.status_code != 200:
        detail = f"GET /v1/models: HTTP {response.status_code}; name the model to probe (--model)"
        raise _Refused(ProbeResult("http_error", detail))
    return str(response.json()["data"][0]["id"])


async def probe_once(client: httpx.AsyncClient, check: ProbeCheck, seconds: float) -> ProbeResult:
    """The whole exchange (the model list too, when asked) is bounded by `seconds`: a server that
    trickles tokens is a timeout too. TTFT and e2e are timed from sending the generation request."""
    try:
        async with asyncio.timeout(seconds):
            model = check.model or await listed_model(client, check.api)
            return await _stream(client, check, model)
    except _Refused as refused:
        return refused.result
    except (TimeoutError, httpx.TimeoutException):
        return ProbeResult("timeout", f"no complete answer within {seconds}s")
    except httpx.TransportError as error:
        return ProbeResult("unreachable", f"{type(error).__name__}: {error}")
    except (ValueError, LookupError, TypeError, AttributeError) as error:  # not what the API promises
        return ProbeResult("bad_response", f"unreadable answer: {type(error).__name__}: {error}")


async def _stream(client: httpx.AsyncClient, check: ProbeCheck, model: str) -> ProbeResult:
    exchange = request(check.api, model)
    started = time.monotonic()
    header = check.fingerprint_header
    ttft = None
    complete = False
    echoed: str | None = None
    async with client.stream("POST", exchange.path, json=exchange.body, headers=exchange.headers) as response:
        fingerprint = response.headers.get(header) if header else None

        def ended(result: str, detail: str = "", e2e: float | None = None) -> ProbeResult:
            return ProbeResult(result, detail, ttft, e2e, fingerprint, model, echoed)

        if response.status_code != 200:
            await response.aread()
            return ended("http_error", f"HTTP {response.status_code}")
        async for data in sse_data(response.aiter_lines()):
            reading = read(check.api, data)
            if reading.error is not None:
                return ended("http_error", reading.error)
            if reading.content and ttft is None:
                ttft = time.monotonic() - started
            complete = complete or reading.complete
            if reading.system_fingerprint is not None and not echoed:
                echoed = reading.system_fingerprint
    e2e = time.monotonic() - started
    if not complete:
        return ended("bad_response", f"stream ended without {completion_marker(check.api)}", e2e)
    if header and not fingerprint_matches(check.variant, fingerprint):
        return ended("fingerprint_mismatch", f"{header} {fingerprint!r}", e2e)
    return ended("ok", "", e2e)
