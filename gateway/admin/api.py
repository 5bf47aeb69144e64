"""The gateway's admin HTTP API: status, the live split, and operator flips.

Binds to loopback unless a bearer token is set (see gateway.app); with a token, every /v1 call
must carry it. /healthz and /metrics stay open for probes and Prometheus.
"""

from __future__ import annotations

import secrets
import time

from fastapi import Depends, FastAPI, Header, HTTPException, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

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


def full_status(gateway: Gateway, ads: AdsServer) -> dict:
    status = gateway.status()
    status["xds"] = {
        "version_prefix": ads.cache.version_prefix,
        "converged": ads.converged(),
        "proxies": ads.streams(),
    }
    return status


def create_admin_app(gateway: Gateway, ads: AdsServer, token: str | None = None) -> FastAPI:
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
        return full_status(gateway, ads)

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

    return app
