"""The rollout's split written into the user's HTTPRoutes through the API server (issue 36): read each
route the spec names, write what gateway/gatewayapi/routes.py makes of it with the resourceVersion it
was read at, and tell the generation written, for the control plane's proof (gateway/gatewayapi/status.py).

A 409 (someone wrote the route between the read and the write) is read again and redone, never
clobbered; one that keeps coming back (CONFLICT_RETRIES in a row) is an error that names the route. A
route that is already as asked is not written (its generation stands). Routes are plain dicts, as the
API server sends them (the client's model classes would drop fields they do not know).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from gateway.gatewayapi.routes import RouteError, released, route_name, written
from gateway.gatewayapi.status import problems
from gateway.kubernetes.api import call_json, status_of
from gateway.spec.gateway_api import RouteRef
from gateway.spec.model import RolloutSpec

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"
CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Written:
    """A route as written: where it is, and the generation the write gave it (or that stood)."""

    route: RouteRef
    generation: int


class RouteWriter:
    def __init__(self, api: client.ApiClient) -> None:
        self.objects = client.CustomObjectsApi(api)

    def read(self, ref: RouteRef) -> dict[str, Any]:
        """The route as the API server holds it; RouteError naming it where it does not exist."""
        try:
            return call_json(
                self.objects.get_namespaced_custom_object, GROUP, VERSION, ref.namespace, PLURAL, ref.name
            )
        except Exception as error:
            if status_of(error) == 404:
                raise RouteError(f"HTTPRoute {ref.namespace}/{ref.name} does not exist") from None
            raise

    def apply(self, spec: RolloutSpec) -> list[Written]:
        """Every route of `spec.gateway_api` carrying `spec`'s split."""
        if spec.gateway_api is None:
            raise RouteError("the spec names no gateway_api routes")
        return [self._write(ref, lambda route: written(route, spec)) for ref in spec.gateway_api.routes]

    def release(self, spec: RolloutSpec) -> list[Written]:
        """Every route without the rules graystack added (the rollout ended)."""
        if spec.gateway_api is None:
            return []
        return [self.release_route(ref) for ref in spec.gateway_api.routes]

    def release_route(self, ref: RouteRef) -> Written:
        """`ref` without the rules graystack added (the spec no longer names it)."""
        return self._write(ref, released)

    def not_accepted(self, done: list[Written]) -> list[str]:
        """What still stands between each written route and its parents' acceptance (empty: accepted)."""
        return [why for why, _ in self.problems(done)]

    def problems(self, done: list[Written]) -> list[tuple[str, bool]]:
        """(why, a refusal) for each condition of each written route not yet proving it accepted."""
        found = []
        for route in done:
            current = self.read(route.route)
            found += [
                (f"{route_name(current)}: {why}", refusal)
                for why, refusal in problems(current, route.generation)
            ]
        return found

    def _write(self, ref: RouteRef, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Written:
        for _ in range(CONFLICT_RETRIES):
            route = self.read(ref)
            wanted = change(route)
            if wanted == route:
                return Written(ref, route["metadata"].get("generation", 0))
            try:
                stored = call_json(
                    self.objects.replace_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    ref.namespace,
                    PLURAL,
                    ref.name,
                    wanted,
                )
            except Exception as error:
                if status_of(error) == 409:
                    continue  # written meanwhile by someone else: read again, redo
                if status_of(error) == 422:
                    raise RouteError(
                        f"{route_name(route)}: the API server refused the write: {_message(error)}"
                    ) from None
                raise
            return Written(ref, stored["metadata"].get("generation", 0))
        raise RouteError(
            f"HTTPRoute {ref.namespace}/{ref.name}: {CONFLICT_RETRIES} conflicts in a row (another writer keeps "
            "changing it); the weights were not written"
        )


def _message(error: Exception) -> str:
    """The API server's own words for a refusal (its Status message), else the error as it came."""
    try:
        return str(json.loads(getattr(error, "body", "") or "{}").get("message") or error)
    except ValueError:
        return str(error)
