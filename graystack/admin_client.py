"""A small client for the gateway's admin API, used by the CLI (which never reaches into the server).

Every answer is parsed into its model of gateway/admin/protocol.py, which refuses a field it does not
know as well as a missing one: a gateway and a client that disagree on the protocol fail here, with
the field named, not later in front of an operator. `dumps` writes an answer back as the gateway sent it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from gateway.admin.protocol import (
    CommandResult,
    ExperimentStatus,
    FaultChange,
    FaultResult,
    FlipResult,
    SplitChange,
    Status,
)

DEFAULT_ADMIN_URL = "http://127.0.0.1:9000"

Answer = TypeVar("Answer", bound=BaseModel)


class AdminError(RuntimeError):
    """The gateway refused the call, could not be reached, or answered outside the protocol; the
    message says which."""


def dumps(answer: BaseModel) -> str:
    """The answer's JSON as the gateway sent it (the fields it left out stay out), indented."""
    return json.dumps(answer.model_dump(mode="json", exclude_unset=True), indent=2)


Request = TypeVar("Request", bound=BaseModel)


def _problems(error: ValidationError, whole: str) -> str:
    """Each field that was wrong, named, with why; `whole` where the model itself was."""
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or whole}: {problem['msg']}"
        for problem in error.errors()
    )


def _request(model: type[Request], **fields: Any) -> Request:
    """The request, checked here as the gateway would check it: a bad value is named before any call."""
    try:
        return model(**fields)
    except ValidationError as error:
        raise AdminError(f"not sent: {_problems(error, 'request')}") from None


class AdminClient:
    def __init__(
        self,
        base_url: str = DEFAULT_ADMIN_URL,
        token: str | None = None,
        timeout: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ):
        """`transport`: where the calls go (default: the network); a test gives a stand-in gateway."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)
        self.base_url = base_url

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def _call(
        self, answer: type[Answer], method: str, path: str, request: BaseModel | None = None, **kwargs: Any
    ) -> Answer:
        if request is not None:
            kwargs["json"] = request.model_dump(mode="json")
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise AdminError(f"cannot reach the gateway admin API at {self.base_url}: {error}") from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise AdminError(f"gateway refused ({response.status_code}): {detail}")
        try:
            return answer.model_validate_json(response.content)
        except ValidationError as error:
            raise AdminError(
                f"{method} {path}: the gateway's answer is not a {answer.__name__}: {_problems(error, 'answer')}"
            ) from None

    def status(self) -> Status:
        return self._call(Status, "GET", "/v1/status")

    def experiment(self) -> ExperimentStatus:
        """strategy: experiment's report (the gateway answers 404 where the rollout is no experiment)."""
        return self._call(ExperimentStatus, "GET", "/v1/experiment")

    def metrics(self) -> str:
        """The gateway's own /metrics page (Prometheus text)."""
        try:
            response = self._http.get("/metrics")
            response.raise_for_status()
        except httpx.HTTPError as error:
            raise AdminError(f"cannot read the gateway's metrics at {self.base_url}: {error}") from None
        return response.text

    def set_weights(
        self, weights: Mapping[str, int], segment: str | None = None, wait_seconds: float = 5.0
    ) -> FlipResult:
        change = _request(SplitChange, weights=dict(weights), segment=segment, wait_seconds=wait_seconds)
        return self._call(FlipResult, "PUT", "/v1/weights", change)

    def rollout_command(
        self, command: str, wait_seconds: float = 5.0, candidate: str | None = None
    ) -> CommandResult:
        """promote, pause, resume, rollback, retry or approve (for one candidate's lane, or all); the
        answer says if it was applied and ACKed."""
        params: dict[str, str | float] = {"wait_seconds": wait_seconds}
        if candidate is not None:
            params["candidate"] = candidate
        return self._call(CommandResult, "POST", f"/v1/rollout/{command}", params=params)

    def set_fault(
        self, variant: str, error_rate: float, status: int, latency_ms: int, wait_seconds: float = 5.0
    ) -> FaultResult:
        """Inject errors and latency into every attempt on `variant` (replacing its last fault)."""
        change = _request(
            FaultChange,
            error_rate=error_rate,
            status=status,
            latency_ms=latency_ms,
            wait_seconds=wait_seconds,
        )
        return self._call(FaultResult, "PUT", f"/v1/faults/{variant}", change)

    def clear_fault(self, variant: str, wait_seconds: float = 5.0) -> FaultResult:
        return self._call(
            FaultResult, "DELETE", f"/v1/faults/{variant}", params={"wait_seconds": wait_seconds}
        )
