"""Reading a request body as a JSON object, turning every kind of bad input into a 4xx ApiError.

A body over the limit is read to its end (and thrown away) before the 413 goes out, up to
DISCARD_BYTES and DISCARD_SECONDS: a server that answers and closes while the client is still
sending leaves unread bytes in its socket, the kernel answers them with a reset, and the client sees
"connection reset" instead of the 413 (every client that closes after one request, HTTP/1.0 or
`Connection: close`, and any keep-alive connection whose sender pauses past uvicorn's keep-alive
timeout). A client that sent `Expect: 100-continue` has not sent its body yet: it gets the 413 at
once and never sends it. Past either bound the 413 goes out without waiting, as a server's answer
to a body it will not read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import ClientDisconnect, Request

from inference.server.errors import CLIENT_CLOSED, INVALID, TOO_LARGE, ApiError, invalid

MAX_BODY_BYTES = 1 << 20  # 1 MiB: the longest prompt the context holds is about 10 KB
DISCARD_BYTES = 64 << 20  # read and dropped past the limit so the client sees the 413, at most
DISCARD_SECONDS = 30.0  # ... and for at most this long


async def read_json_object(request: Request, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The body as a dict: 413 when over `limit`, 400 when not UTF-8, not JSON, or not an object, 499
    when the client left before sending all of it (e.g. Envoy gave up on a slow attempt)."""
    chunks = request.stream()
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        await _discard(request, chunks, int(declared))
        raise ApiError(413, TOO_LARGE, f"request body is {declared} bytes; the limit is {limit}")
    raw = bytearray()
    try:
        async for chunk in chunks:
            raw += chunk
            if len(raw) > limit:
                await _discard(request, chunks, None)
                raise ApiError(413, TOO_LARGE, f"request body exceeds the limit of {limit} bytes")
    except ClientDisconnect:
        raise ApiError(CLIENT_CLOSED, INVALID, "the client went away while sending the body") from None
    return _parse(bytes(raw))


async def _discard(request: Request, chunks: AsyncIterator[bytes], declared: int | None) -> None:
    """Read the rest of an oversized body and drop it, within the bounds (the module says why)."""
    if request.headers.get("expect", "").lower() == "100-continue" or (declared or 0) > DISCARD_BYTES:
        return
    dropped = 0
    try:
        async with asyncio.timeout(DISCARD_SECONDS):
            async for chunk in chunks:
                dropped += len(chunk)
                if dropped > DISCARD_BYTES:
                    return
    except (TimeoutError, ClientDisconnect):
        return


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise invalid(f"request body is not valid UTF-8 (byte {error.start})") from None
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError; so are huge ints
        raise invalid(f"request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise invalid(f"request body must be a JSON object, not {type(body).__name__}")
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise invalid("request body holds a lone UTF-16 surrogate escape (e.g. \\ud800)") from None
    except RecursionError:
        raise invalid("request body is nested too deeply") from None
    return body
