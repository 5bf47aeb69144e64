"""The gateway's admin HTTP API: status, the live split, operator flips and rollout commands.

Binds to loopback unless a bearer token is set (see gateway.app); with a token, every /v1 call
must carry it. /healthz and /metrics stay open for probes and Prometheus.

Every answer is a model of gateway/admin/protocol.py; every refusal is an error of gateway/errors.py,
answered with its one status (ERROR_STATUS) and `{"detail": message}`.

Injected faults (PUT/DELETE /v1/faults/{variant}) are refused (403) unless the gateway was started with
fault injection on, and never served on a non-loopback admin without a token. A fault lives in the memory
of the replica that took it and reaches the proxies connected to that replica.

With several replicas (Kubernetes mode) only the leader acts on rollout commands and flips: a follower's
change would live in its memory only, overwritten by the leader's next state write, so a follower answers
409 naming the leader instead. Its status still answers, and says who leads.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.admin.protocol import (
    CohortStatus,
    CommandResult,
    ExperimentStatus,
    FaultChange,
    FaultResult,
    FlipResult,
    MisnamedStatus,
    PickerStatus,
    RolloutName,
    RolloutSection,
    SplitChange,
    Status,
    XdsStatus,
)
from gateway.answers.store import AnswerStore
from gateway.envoy.faults import Fault
from gateway.errors import Conflict, GatewayError, NotFound, Refused, SpecError, Unreachable
from gateway.notify.status import NotificationsStatus
from gateway.rollout.controller import Rollouts
from gateway.rollout.rollout_state import Command
from gateway.service import Gateway, fault_status
from gateway.xds.server import AdsServer

ERROR_STATUS: dict[type[GatewayError], int] = {
    SpecError: 400,
    Refused: 403,
    NotFound: 404,
    Conflict: 409,
    Unreachable: 502,
}


FAULTS_OFF = (
    "fault injection is off on this gateway: start it with --enable-fault-injection "
    "(GRAYSTACK_ENABLE_FAULT_INJECTION=1)"
)


def fault_injection_refusal(enabled: bool, admin_loopback: bool, token: str | None) -> str | None:
    """Why this gateway refuses injected faults, or None where it takes them."""
    if not enabled:
        return FAULTS_OFF
    if not admin_loopback and not token:
        return "fault injection needs an admin token when the admin API is not on loopback"
    return None


@dataclass(frozen=True)
class Leadership:
    """Which replica drives the rollout, as this one last saw it (the Lease's holder)."""

    leading: bool
    identity: str
    leader: str | None  # None: no replica holds the Lease right now


def follower_refusal(leadership: Leadership) -> str:
    other = leadership.leader not in (None, leadership.identity)  # itself: it could not renew, stepped down
    leader = f"{leadership.leader} leads" if other else "no replica leads right now"
    return (
        f"{leadership.identity} is not the leader ({leader}): a change here would be overwritten by the "
        "leader's state; send it through the gateway's admin Service, which reaches the leader"
    )


def full_status(
    gateway: Gateway,
    ads: AdsServer,
    controller: Rollouts | None = None,
    fault_injection: bool = False,
    leadership: Leadership | None = None,
    answers: AnswerStore | None = None,
    notifications: NotificationsStatus | None = None,
    picker: PickerStatus | None = None,
) -> Status:
    """GET /v1/status; `leadership`: None where this process alone drives the rollout (no leader fields);
    `answers`: the measured answers, whose keyed share the cohorts section gives (None: no section), and
    the servers that named themselves otherwise than their variant;
    `notifications`: the receivers' deliveries (None: no section); `picker`: the Endpoint Picker's (None:
    no section)."""
    own = gateway.status()
    rollout: RolloutSection | RolloutName = (
        RolloutSection(name=own.rollout, **dict(controller.status()))
        if controller
        else RolloutName(name=own.rollout)
    )
    status = Status(
        rollout=rollout,
        generation=own.generation,
        spec=own.spec,
        routing=own.routing,
        faults=own.faults,
        xds=XdsStatus(
            version_prefix=ads.cache.version_prefix,
            converged=ads.converged(),
            proxies=ads.streams(),
            disconnected=[proxy.describe() for proxy in ads.disconnected()],
        ),
        fault_injection=fault_injection,
    )
    sources = [source.label for source in gateway.spec.routing.affinity]
    if answers is not None and sources:
        cohorts = CohortStatus(sources=sources, answers=answers.routed, keyed=dict(answers.keyed))
        status = status.model_copy(update={"cohorts": cohorts})
    if answers is not None and answers.misnamed:
        misnamed = [
            MisnamedStatus(variant=variant, named=named, answers=n)
            for (variant, named), n in sorted(answers.misnamed.items())
        ]
        status = status.model_copy(update={"misnamed": misnamed})
    if notifications is not None:
        status = status.model_copy(update={"notifications": notifications})
    if picker is not None:
        status = status.model_copy(update={"picker": picker})
    if leadership is None:
        return status
    leader = {
        "leader": leadership.leading,
        "identity": leadership.identity,
        "leader_identity": leadership.leader,
    }
    return status.model_copy(update=leader)


def create_admin_app(
    gateway: Gateway,
    ads: AdsServer,
    token: str | None = None,
    controller: Rollouts | None = None,
    leadership: Callable[[], Leadership | None] = lambda: None,
    fault_refusal: str | None = FAULTS_OFF,
    answers: AnswerStore | None = None,
    notifications: Callable[[], NotificationsStatus | None] = lambda: None,
    picker: Callable[[], PickerStatus | None] = lambda: None,
) -> FastAPI:
    """`leadership()`: asked at every call; None where this process alone drives the rollout (local).
    `fault_refusal`: why faults are refused (fault_injection_refusal), None to take them. `answers`: the
    measured answers, for the cohorts' keyed share in the status. `notifications()`: the receivers'
    deliveries, and `picker()`: the Endpoint Picker's state, both asked at every status call."""

    def authorized(authorization: str | None = Header(default=None)) -> None:
        if token is None:
            return
        expected = f"Bearer {token}"
        if authorization is None or not secrets.compare_digest(authorization.encode(), expected.encode()):
            raise HTTPException(status_code=401, detail="missing or wrong bearer token")

    def faults_allowed() -> None:
        if fault_refusal is not None:
            raise Refused(fault_refusal)

    def leading() -> None:
        now = leadership()
        if now is not None and not now.leading:
            raise Conflict(follower_refusal(now))

    app = FastAPI(title="graystack gateway admin", docs_url=None, redoc_url=None)

    @app.exception_handler(GatewayError)
    def refused(_: Request, error: GatewayError) -> JSONResponse:
        status = next(code for kind, code in ERROR_STATUS.items() if isinstance(error, kind))
        return JSONResponse({"detail": str(error)}, status_code=status)

    v1 = Depends(authorized)
    leader_only = Depends(leading)
    faults_on = Depends(faults_allowed)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/status", dependencies=[v1], response_model=Status, response_model_exclude_unset=True)
    def status() -> Status:
        return full_status(
            gateway,
            ads,
            controller,
            fault_refusal is None,
            leadership(),
            answers,
            notifications(),
            picker(),
        )

    @app.get("/v1/experiment", dependencies=[v1], response_model=ExperimentStatus)
    def experiment() -> ExperimentStatus:
        """strategy: experiment's report (the same as GET /v1/status's rollout.experiment)."""
        status = controller.status() if controller is not None else None
        if status is None or status.experiment is None:
            raise NotFound("this gateway runs no experiment (strategy: experiment)")
        lanes = [lane.experiment for lane in status.candidates if lane.experiment is not None]
        return status.experiment.model_copy(update={"candidates": lanes})

    @app.put(
        "/v1/weights",
        dependencies=[v1, leader_only],
        response_model=FlipResult,
        response_model_exclude_unset=True,
    )
    async def set_weights(change: SplitChange) -> FlipResult:
        """Flip, then wait for every proxy's ACK; the answer stays small whatever the fleet size."""
        started = time.monotonic()
        gateway.set_split(change.weights, change.segment)
        acked = await ads.wait_converged(change.wait_seconds)
        status = gateway.status()
        return FlipResult(
            acked=acked,
            ack_seconds=round(time.monotonic() - started, 6) if acked else None,
            proxies=ads.proxy_count(),
            generation=status.generation,
            routing=status.routing,
        )

    async def change_fault(variant: str, fault: Fault | None, wait_seconds: float) -> FaultResult:
        started = time.monotonic()
        faults = gateway.set_fault(variant, fault)
        acked = await ads.wait_converged(wait_seconds)
        return FaultResult(
            variant=variant,
            fault=fault_status(faults[variant]) if variant in faults else None,
            acked=acked,
            ack_seconds=round(time.monotonic() - started, 6) if acked else None,
            proxies=ads.proxy_count(),
            generation=gateway.generation,
        )

    @app.put(
        "/v1/faults/{variant}",
        dependencies=[v1, faults_on],
        response_model=FaultResult,
        response_model_exclude_unset=True,
    )
    async def set_fault(variant: str, change: FaultChange) -> FaultResult:
        """Inject a fault into every attempt on `variant` (replacing its last one); then wait for ACKs."""
        fault = Fault(change.error_rate, change.status, change.latency_ms)
        return await change_fault(variant, fault, change.wait_seconds)

    @app.delete(
        "/v1/faults/{variant}",
        dependencies=[v1, faults_on],
        response_model=FaultResult,
        response_model_exclude_unset=True,
    )
    async def clear_fault(variant: str, wait_seconds: float = Query(default=5.0, ge=0, le=60)) -> FaultResult:
        return await change_fault(variant, None, wait_seconds)

    @app.post(
        "/v1/rollout/{command}",
        dependencies=[v1, leader_only],
        response_model=CommandResult,
        response_model_exclude_unset=True,
    )
    async def rollout_command(
        command: Command,
        wait_seconds: float = Query(default=5.0, ge=0, le=60),
        candidate: str | None = Query(default=None, min_length=1),
    ) -> CommandResult:
        """promote, pause, resume, rollback, retry or approve, applied at once; then wait for every proxy's
        ACK. `candidate`: the one candidate's lane it is for, where several are rolled out (None: all)."""
        if controller is None:
            raise NotFound("this gateway runs no rollout controller")
        ignored = await controller.command(command, candidate)
        acked = await ads.wait_converged(wait_seconds)
        return CommandResult(
            command=command.value,
            applied=ignored is None,
            ignored=ignored,
            acked=acked,
            proxies=ads.proxy_count(),
            rollout=controller.status(),
        )

    return app
