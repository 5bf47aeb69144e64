"""The model server's ASGI app and its uvicorn runner.

One process serves one variant from one checkpoint. Routes: POST /v1/messages, POST
/v1/messages/count_tokens, POST /v1/chat/completions, POST /v1/responses with GET and DELETE
/v1/responses/{id} (inference/server/responses.py), POST /v1/embeddings, GET /v1/models[/{id}] (in the caller's API's
format: inference/server/models.py), GET /healthz (alive), GET /readyz (weights loaded and a
warm-up generation done: 503 until then), GET /metrics, GET /admin/outputs/{request_id} (a greedy answer's digest, for
the shadow comparison: inference/server/outputs.py), and /admin/faults with --enable-fault-injection. Every response
carries `x-graystack-variant` and `x-model-fingerprint`, so a client (or a test) behind the gateway
can tell which deployment answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inference.checkpoint import MODEL_NAME, LoadedModel
from inference.config import BOS
from inference.engine import DEFAULT_TOKEN_BUDGET, Engine, GenerationRequest
from inference.server import count_tokens, embeddings, messages, openai_chat
from inference.server.errors import INVALID, NOT_FOUND, ApiError
from inference.server.faults import Faults, fault_routes
from inference.server.keepalive import DEFAULT_INTERVAL
from inference.server.models import model_routes
from inference.server.outputs import ShadowComparator, output_routes
from inference.server.responses import ResponseStore, responses_routes
from inference.server.serving import Serving
from inference.server.telemetry import ServerMetrics

log = logging.getLogger(__name__)
# Paths whose errors (a wrong method, say) are OpenAI's shape; every other path's are the Messages API's.
OPENAI_PREFIXES = ("/v1/chat/", "/v1/responses", "/v1/embeddings")
WARM_UP = GenerationRequest(prompt=[BOS, *b"user: warm up\nassistant: "], max_tokens=2, temperature=0)


@dataclass(frozen=True)
class ServerOptions:
    enable_fault_injection: bool = False
    max_running: int = 8  # sequences sharing each decode step
    max_waiting: int = 32  # queued beyond those; one more is answered 529
    seed: int | None = None  # sampling seed for requests that bring none
    compare_with: tuple[str, ...] = ()  # baseline URLs: compare shadow copies' answers with theirs
    keepalive: float = DEFAULT_INTERVAL  # a started stream pings after this long without a token
    token_budget: int = DEFAULT_TOKEN_BUDGET  # new positions per engine step (decode rows + prompt chunks)


class IdentityHeaders:
    """ASGI middleware: stamps every response with the variant and the model fingerprint."""

    def __init__(self, app: ASGIApp, variant: str, fingerprint: str) -> None:
        self.app = app
        self.headers = [
            (b"x-graystack-variant", variant.encode()),
            (b"x-model-fingerprint", fingerprint.encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        await self.app(scope, receive, stamped)


async def _warm_up(serving: Serving) -> None:
    """One short generation through the engine, so the first real request pays no first-call costs."""
    try:
        async for _ in serving.engine.submit(WARM_UP).stream():
            pass
    except Exception:
        log.exception("warm-up generation failed; /readyz stays 503")
        return
    serving.ready = True
    log.info("ready: %s %s", serving.variant, serving.fingerprint)


def create_app(loaded: LoadedModel, options: ServerOptions | None = None) -> FastAPI:
    options = options or ServerOptions()
    variant = loaded.model.variant
    metrics = ServerMetrics(variant, MODEL_NAME)
    engine = Engine(
        loaded.model,
        options.max_running,
        options.max_waiting,
        options.seed,
        metrics.record_step,
        options.token_budget,
    )
    metrics.watch(engine)
    metrics.set_model(
        loaded.fingerprint,
        str(loaded.status.status),
        engine.effective_window(None),
        loaded.status.fingerprint or "",
    )
    serving = Serving(
        engine, metrics, Faults(), loaded.fingerprint, str(loaded.status.status), options.keepalive
    )
    if options.compare_with:
        serving.comparator = ShadowComparator(options.compare_with, metrics.shadow_comparisons, variant)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        warm_up = asyncio.create_task(_warm_up(serving))
        try:
            yield
        finally:
            warm_up.cancel()
            if serving.comparator is not None:
                await serving.comparator.stop()
            await engine.stop()

    app = FastAPI(
        title=f"graystack model server ({variant})",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.serving = serving
    app.include_router(messages.router)
    app.include_router(count_tokens.router)
    app.include_router(model_routes(variant))
    app.include_router(openai_chat.router)
    app.include_router(responses_routes(ResponseStore()))
    app.include_router(embeddings.router)
    app.include_router(output_routes(serving.outputs))
    if options.enable_fault_injection:
        app.include_router(fault_routes(serving.faults))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        """Unknown paths and wrong methods answer in the error format of the API the client speaks."""
        kind = NOT_FOUND if error.status_code == 404 else INVALID
        render = (
            openai_chat.error_response
            if request.url.path.startswith(OPENAI_PREFIXES)
            else messages.error_response
        )
        response = render(ApiError(error.status_code, kind, str(error.detail)))
        response.headers.update(error.headers or {})
        return response

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        body = {"ready": serving.ready, "variant": variant, "weight_status": serving.weight_status}
        return JSONResponse(body, status_code=200 if serving.ready else 503)

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(IdentityHeaders, variant=variant, fingerprint=loaded.fingerprint)
    return app


def run_server(app: FastAPI, host: str, port: int, log_level: str = "info") -> None:
    """Serve until SIGINT/SIGTERM; streams in flight get a few seconds to finish."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run()
