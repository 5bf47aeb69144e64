"""Where each variant's pods are. Local mode: the IP:port lists written in the spec."""

from __future__ import annotations

from gateway.envoy.resources import EndpointMap
from gateway.spec.model import RolloutSpec


def static_endpoints(spec: RolloutSpec) -> EndpointMap:
    """Endpoints straight from the spec; a `service:` variant needs the Kubernetes source."""
    endpoints = {}
    for name, variant in spec.variants.items():
        if variant.endpoints is None:
            raise ValueError(
                f"variants.{name}: `service: {variant.service}` needs the Kubernetes endpoint source; "
                "local mode takes `endpoints: [IP:PORT, ...]`"
            )
        endpoints[name] = list(variant.endpoints)
    return endpoints
