"""The gateway's admin HTTP API: status, the live split, operator flips and rollout commands.

Binds to loopback unless a bearer token is set (see gateway.app); with a token, every /v1 call
must carry it. /healthz and /metrics stay open for probes and Prometheus.
"""

from __future__ import annotations

import secrets
import time

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from gateway.rollout.controller import RolloutController
from gateway.rollout.machine import Command
from gateway.rollout.spec import SpecError
from gateway.service import Gateway
from gateway.xds.server import AdsServer


class SplitChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights: dict[str, int] = Field(
        description="variant -> percent; one variant may be left out for the rest"
    )
    segment: str | None = Field(
        default=None, description="a routing-header value; omit for the default split"
    )
    wait_seconds: float = Field(default=5.0, ge=0, le=60, description="how long to wait for proxies to ACK")


def full_status(gateway: Gateway, ads: AdsServer, controller: RolloutController | None = None) -> dict:
    status = gateway.status()
    status["xds"] = {
        "version_prefix": ads.cache.version_prefix,
        "converged": ads.converged(),
        "proxies": ads.streams(),
    }
    status["rollout"] = {"name": status["rollout"], **(controller.status() if controller else {})}
    return status


def create_admin_app(
    gateway: Gateway, ads: AdsServer, token: str | None = None, controller: RolloutController | None = None
) -> FastAPI:
    def authorized(authorization: str | None = Header(default=None)) -> None:
        if token is None:
            return
        expected = f"Bearer {token}"
        if authorization is None or not secrets.compare_digest(authorization.encode(), expected.encode()):
            raise HTTPException(status_code=401, detail="missing or wrong bearer token")

    app = FastAPI(title="graystack gateway admin", docs_url=None, redoc_url=None)
    v1 = Depends(authorized)

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/status", dependencies=[v1])
    def status() -> dict:
        return full_status(gateway, ads, controller)

    @app.put("/v1/weights", dependencies=[v1])
    async def set_weights(change: SplitChange) -> dict:
        """Flip, then wait for every proxy's ACK; the answer stays small whatever the fleet size."""
        started = time.monotonic()
        try:
            gateway.set_split(change.weights, change.segment)
        except SpecError as error:
            raise HTTPException(status_code=400, detail=str(error)) from None
        acked = await ads.wait_converged(change.wait_seconds)
        status = gateway.status()
        return {
            "acked": acked,
            "ack_seconds": round(time.monotonic() - started, 6) if acked else None,
            "proxies": ads.proxy_count(),
            "generation": status["generation"],
            "routing": status["routing"],
        }

    @app.post("/v1/rollout/{command}", dependencies=[v1])
    async def rollout_command(
        command: Command, wait_seconds: float = Query(default=5.0, ge=0, le=60)
    ) -> dict:
        """promote, pause, resume, rollback or retry, applied at once; then wait for every proxy's ACK."""
        if controller is None:
            raise HTTPException(status_code=404, detail="this gateway runs no rollout controller")
        result = await controller.command(command)
        result["acked"] = await ads.wait_converged(wait_seconds)
        result["proxies"] = ads.proxy_count()
        result["rollout"] = controller.status()
        return result

    return app
