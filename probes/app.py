"""The probe's HTTP face: /metrics for Prometheus and /healthz, on its own port."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import uvicorn
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from probes.runner import Probe


def create_probe_app(probe: Probe) -> FastAPI:
    app = FastAPI(title="graystack probe", docs_url=None, redoc_url=None)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(probe.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        status, last, check = probe.last_status, probe.last_probe, probe.check
        compared = probe.last_comparison
        return {
            "status": "ok",
            "weight_status": status.status.value if status else None,
            "weight_reason": status.reason if status else None,
            "weight_fingerprint": status.fingerprint if status else None,
            "last_probe": last.result if last else None,
            "last_probe_detail": last.detail if last else None,
            "api": check.api.value,
            "model": check.model or None,  # until the server's list has named one
            "ttft": "time to the first event carrying generated text",
            "fingerprint_header": check.fingerprint_header,  # null: not checked
            "loaded_check": probe.options.loaded_check.value,
            # did the server load the file? true, false (a mismatch), null: not compared (or off)
            "server_agrees": compared.agrees if compared else None,
            "server_reason": compared.reason if compared else None,
        }

    return app


async def serve_probe(probe: Probe, host: str, port: int) -> None:
    """The loop and the HTTP server together, until interrupted."""
    server = uvicorn.Server(
        uvicorn.Config(create_probe_app(probe), host=host, port=port, log_level="warning")
    )
    loop_task = asyncio.create_task(probe.run())
    try:
        await server.serve()
    finally:
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
