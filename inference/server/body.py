"""Reading a request body as a JSON object, turning every kind of bad input into a 4xx ApiError."""

from __future__ import annotations

import json

from starlette.requests import ClientDisconnect, Request

from inference.server.errors import CLIENT_CLOSED, INVALID, TOO_LARGE, ApiError, invalid

MAX_BODY_BYTES = 1 << 20  # 1 MiB: the longest prompt the context holds is about 10 KB


async def read_json_object(request: Request, limit: int = MAX_BODY_BYTES) -> dict:
    """The body as a dict: 413 when over `limit`, 400 when not UTF-8, not JSON, or not an object, 499
    when the client left before sending all of it (e.g. Envoy gave up on a slow attempt)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, TOO_LARGE, f"request body is {declared} bytes; the limit is {limit}")
    raw = bytearray()
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise ApiError(413, TOO_LARGE, f"request body exceeds the limit of {limit} bytes")
    except ClientDisconnect:
        raise ApiError(CLIENT_CLOSED, INVALID, "the client went away while sending the body") from None
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
