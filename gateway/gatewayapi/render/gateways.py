"""The gateways `graystack render` writes for, each its builder, and the one call that picks it."""

from __future__ import annotations

from collections.abc import Callable

from gateway.gatewayapi.render import envoy_gateway, istio
from gateway.gatewayapi.render.common import Rendered, gateway_api
from gateway.gatewayapi.render.options import RenderError, RenderOptions
from gateway.spec.model import RolloutSpec

GATEWAYS: dict[str, Callable[[RolloutSpec, RenderOptions], Rendered]] = {
    "envoy-gateway": envoy_gateway.rendered,
    "istio": istio.rendered,
}


def render(spec: RolloutSpec, gateway: str, options: RenderOptions) -> Rendered:
    """The objects (and the notes) for `gateway`; RenderError naming what is wrong: a gateway graystack
    renders for none of, a spec without `gateway_api`."""
    build = GATEWAYS.get(gateway)
    if build is None:
        raise RenderError(f"--gateway {gateway!r}: graystack renders for {', '.join(GATEWAYS)}")
    gateway_api(spec)
    return build(spec, options)
