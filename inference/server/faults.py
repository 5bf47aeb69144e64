"""Fault injection for resilience drills: off unless the server starts with --enable-fault-injection.

With it on, `POST /admin/faults {"error_rate": 0.05, "added_latency_ms": 200}` changes (the fields
given; the rest stay) and `GET /admin/faults` reads what model requests suffer: a delay before each
(before any byte of the answer), a delay before each generated token (`inter_token_latency_ms`: a
slow but steady model), and a share answered with an injected error (`error_status` 500 api_error, or 529 overloaded_error),
counted in graystack_requests_total like real ones. Only loopback clients may use the endpoint, and
not through a proxy (403 otherwise); without the flag it does not exist (404).

Errors and latency per attempt, for any upstream, come from the gateway (`graystack fault`, Envoy's
fault filter: gateway/envoy/faults.py). This endpoint stays for what Envoy cannot do from outside the
server: slow tokens in a started stream (`inter_token_latency_ms`), a delay the server's own TTFT and
latency histograms see (`added_latency_ms`; Envoy's delay is before the server), and errors in the API's
JSON format counted in the server's own `graystack_requests_total`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference.server.body import read_json_object
from inference.server.errors import API, OVERLOADED, PERMISSION, ApiError, error_body, from_validation


class FaultConfig(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    error_rate: float = Field(default=0.0, ge=0, le=1)
    added_latency_ms: int = Field(default=0, ge=0, le=60_000)
    inter_token_latency_ms: int = Field(default=0, ge=0, le=60_000)
    error_status: Literal[500, 529] = 500


class Faults:
    def __init__(self) -> None:
        self.config = FaultConfig()
        self._random = random.Random()

    async def inject(self) -> None:
        """Delay, then maybe fail, one model request as configured (nothing by default)."""
        config = self.config
        if config.added_latency_ms:
            await asyncio.sleep(config.added_latency_ms / 1000)
        if config.error_rate and self._random.random() < config.error_rate:
            kind = OVERLOADED if config.error_status == 529 else API
            raise ApiError(config.error_status, kind, f"injected fault (error_rate {config.error_rate})")

    async def pace(self) -> None:
        """Delay one generated token as configured (nothing by default)."""
        if self.config.inter_token_latency_ms:
            await asyncio.sleep(self.config.inter_token_latency_ms / 1000)

    def update(self, change: dict[str, Any]) -> FaultConfig:
        self.config = FaultConfig.model_validate({**self.config.model_dump(), **change})
        return self.config


PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-proto")  # Envoy sets x-forwarded-proto


def _direct_from_loopback(request: Request) -> bool:
    """A loopback client that did not come through a proxy: a local Envoy would otherwise let anyone in."""
    if request.client is None or any(name in request.headers for name in PROXY_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:
        return False


def fault_routes(faults: Faults) -> APIRouter:
    """The admin endpoint; mounted only when fault injection is enabled."""
    router = APIRouter()

    async def answer(request: Request, change: bool) -> JSONResponse:
        try:
            if not _direct_from_loopback(request):
                raise ApiError(
                    403, PERMISSION, "the fault admin endpoint answers direct loopback clients only"
                )
            if change:
                try:
                    faults.update(await read_json_object(request))
                except ValidationError as error:
                    raise from_validation(error) from None
        except ApiError as error:
            return JSONResponse(error_body(error), status_code=error.status)
        return JSONResponse(faults.config.model_dump())

    @router.get("/admin/faults")
    async def read_faults(request: Request) -> JSONResponse:
        return await answer(request, change=False)

    @router.post("/admin/faults")
    async def change_faults(request: Request) -> JSONResponse:
        return await answer(request, change=True)

    return router
