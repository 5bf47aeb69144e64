"""Where each `service:` variant's pods are: the ready addresses of its Service's EndpointSlices
(discovery.k8s.io/v1, label kubernetes.io/service-name), at the variant's `port` (the pod's port, as the
slices list it). A variant written with `endpoints:` keeps them, as in local mode."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from gateway.envoy.resources import EndpointMap
from gateway.spec.model import RolloutSpec

SERVICE_LABEL = "kubernetes.io/service-name"


def ready_addresses(slices: Mapping[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Service name -> its sorted ready addresses. A missing `ready` condition means ready (the API's
    rule); a terminating pod is not ready, so Envoy stops sending it new requests."""
    by_service: dict[str, set[str]] = {}
    for piece in slices.values():
        service = (piece["metadata"].get("labels") or {}).get(SERVICE_LABEL)
        if service is None:
            continue
        addresses = by_service.setdefault(service, set())
        for endpoint in piece.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready", True) is not False:
                addresses.update(endpoint.get("addresses") or [])
    return {service: sorted(addresses) for service, addresses in by_service.items()}


class EndpointSlices:
    """The latest ready addresses per Service, updated by a reflector thread, read by the gateway."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_service: dict[str, list[str]] = {}

    def update(self, slices: Mapping[str, dict[str, Any]]) -> bool:
        """Takes the whole set of slices; says whether any Service's addresses changed."""
        addresses = ready_addresses(slices)
        with self._lock:
            changed = addresses != self._by_service
            self._by_service = addresses
        return changed

    def endpoints_for(self, spec: RolloutSpec) -> EndpointMap:
        with self._lock:
            by_service = self._by_service
        endpoints = {}
        for name, variant in spec.variants.items():
            if variant.endpoints is not None:
                endpoints[name] = list(variant.endpoints)
            else:
                service, port = variant.service, variant.port
                assert service is not None  # Variant._one_source: endpoints, or a service with its port
                assert port is not None
                endpoints[name] = [(ip, port) for ip in by_service.get(service, [])]
        return endpoints
