"""GET /v1/models and GET /v1/models/{id}: the model this server answers as, in the caller's format.

Many clients list the models first (the official SDKs' `models.list()`, load tools, UIs). The OpenAI
and Anthropic APIs share the path with different shapes, so the request picks: a caller that sends
`anthropic-version` or `x-api-key` (what the anthropic SDK sends on every request) gets the Anthropic
list (`{"data": [{"type": "model", ...}], "has_more": false, "first_id", "last_id"}`), any other the
OpenAI list (`{"object": "list", "data": [{"object": "model", ...}]}`), errors likewise.

One model is listed: MODEL_NAME, the name to send. (Generation answers under any `model` a client
sends, echoing it back; only this listing and its lookup know one name.) Its creation time is when
the server started: the served checkpoint has no creation date of its own.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from starlette.requests import Request

from inference.checkpoint import MODEL_NAME
from inference.server import messages, openai_chat
from inference.server.errors import NOT_FOUND, ApiError

OWNER = "graystack"


def speaks_anthropic(request: Request) -> bool:
    """The Anthropic API's own headers (its SDK sends both; the OpenAI SDK sends neither)."""
    return "anthropic-version" in request.headers or "x-api-key" in request.headers


def model_routes(variant: str, created: float | None = None) -> APIRouter:
    """The listing and the lookup for a server of `variant`, created at `created` (default: now)."""
    created = time.time() if created is None else created
    display_name = f"{MODEL_NAME} ({variant})"

    def openai_model() -> dict[str, Any]:
        return {"id": MODEL_NAME, "object": "model", "created": int(created), "owned_by": OWNER}

    def anthropic_model() -> dict[str, Any]:
        created_at = datetime.fromtimestamp(int(created), UTC).isoformat().replace("+00:00", "Z")
        return {"type": "model", "id": MODEL_NAME, "display_name": display_name, "created_at": created_at}

    router = APIRouter()

    @router.get("/v1/models")
    async def list_models(request: Request) -> JSONResponse:
        if speaks_anthropic(request):
            listing = {"data": [anthropic_model()], "has_more": False}
            return JSONResponse({**listing, "first_id": MODEL_NAME, "last_id": MODEL_NAME})
        return JSONResponse({"object": "list", "data": [openai_model()]})

    @router.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> JSONResponse:
        anthropic = speaks_anthropic(request)
        if model_id != MODEL_NAME:
            error = ApiError(
                404, NOT_FOUND, f"model {model_id!r} not found; this server serves {MODEL_NAME!r}"
            )
            return (messages if anthropic else openai_chat).error_response(error)
        return JSONResponse(anthropic_model() if anthropic else openai_model())

    return router
