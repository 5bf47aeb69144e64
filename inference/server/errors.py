"""The errors a model request can end in, independent of the protocol that renders them."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from inference.engine import EngineError, GenerationFailed, InvalidRequest, Overloaded

# The Messages API's error types.
INVALID = "invalid_request_error"
TOO_LARGE = "request_too_large"
NOT_FOUND = "not_found_error"
PERMISSION = "permission_error"
OVERLOADED = "overloaded_error"
API = "api_error"
# nginx's "client closed request": the client left before its request was read. Nobody reads the answer;
# the status keeps it apart, in the request counts, from the client's mistakes (400) and the server's (5xx).
CLIENT_CLOSED = 499
# What an overloaded answer asks the client to wait: about one step of a full batch plus a short
# reply's decode. The SDKs (anthropic, openai) and Envoy's retry back-off honour `retry-after`.
RETRY_AFTER_SECONDS = 1


class ApiError(Exception):
    """An HTTP error answer: status, the Messages API's error type, and a message for the client."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message

    @property
    def headers(self) -> dict[str, str]:
        """Headers the answer carries: `retry-after` on 529, so a client backs off instead of failing."""
        return {"retry-after": str(RETRY_AFTER_SECONDS)} if self.kind == OVERLOADED else {}


def invalid(message: str) -> ApiError:
    return ApiError(400, INVALID, message)


def from_engine(error: EngineError) -> ApiError:
    if isinstance(error, InvalidRequest):
        return invalid(str(error))
    if isinstance(error, Overloaded):
        return ApiError(529, OVERLOADED, str(error))
    assert isinstance(error, GenerationFailed), error
    return ApiError(500, API, str(error))


def from_validation(error: ValidationError) -> ApiError:
    """400 naming the first offending field, e.g. `messages.0.role: Input should be 'user' or 'assistant'`."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    more = error.error_count() - 1
    return invalid(f"{where}: {first['msg']}" + (f" (and {more} more problems)" if more else ""))


def error_body(error: ApiError) -> dict[str, Any]:
    """The Messages API's error object; the server's own routes (admin) answer in it too."""
    return {"type": "error", "error": {"type": error.kind, "message": error.message}}
