"""A small client for the gateway's admin API, used by the CLI (which never reaches into the server)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

DEFAULT_ADMIN_URL = "http://127.0.0.1:9000"


class AdminError(RuntimeError):
    """The gateway refused the call or could not be reached; the message says which."""


class AdminClient:
    def __init__(self, base_url: str = DEFAULT_ADMIN_URL, token: str | None = None, timeout: float = 15.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)
        self.base_url = base_url

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs) -> dict:
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
        return response.json()

    def status(self) -> dict:
        return self._call("GET", "/v1/status")

    def set_weights(
        self, weights: Mapping[str, int], segment: str | None = None, wait_seconds: float = 5.0
    ) -> dict:
        body = {"weights": dict(weights), "segment": segment, "wait_seconds": wait_seconds}
        return self._call("PUT", "/v1/weights", json=body)

    def rollout_command(self, command: str, wait_seconds: float = 5.0) -> dict:
        """promote, pause, resume, rollback or retry; the answer says if it was applied and ACKed."""
        return self._call("POST", f"/v1/rollout/{command}", params={"wait_seconds": wait_seconds})

    def set_fault(
        self, variant: str, error_rate: float, status: int, latency_ms: int, wait_seconds: float = 5.0
    ) -> dict:
        """Inject errors and latency into every attempt on `variant` (replacing its last fault)."""
        body = {
            "error_rate": error_rate,
            "status": status,
            "latency_ms": latency_ms,
            "wait_seconds": wait_seconds,
        }
        return self._call("PUT", f"/v1/faults/{variant}", json=body)

    def clear_fault(self, variant: str, wait_seconds: float = 5.0) -> dict:
        return self._call("DELETE", f"/v1/faults/{variant}", params={"wait_seconds": wait_seconds})
